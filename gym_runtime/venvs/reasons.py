"""Why a server's venv was rebuilt: which input changed since its last build.

Venvs are content-addressed (:mod:`gym_runtime.venvs.digest`), so a changed input means a new
digest and a new venv, silently. For the build line to say *why*, every build (and reuse) records,
per server, the digest inputs it was built from in ``<venv root>/.servers/<key>.json`` (key: the
package directory and the instance name). The next build of that server compares: a requirement
line uv is given, a ``wheels/`` file and its old/new sha256 (a wheel rebuilt under the same version,
case C14's kind), an ``overrides.txt`` line, the interpreter, an injected pin, uv's version, uv's index settings, a local
project, hash mode.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import Any

from gym_runtime.files import write_json
from gym_runtime.venvs.uvrun import redact_url

MAX_LINES = 5  # install-file lines named; the rest are counted


def _record(venv_dir: Path, package_root: Path | None, instance: str) -> Path:
    key = f"{package_root.resolve() if package_root else ''}\0{instance}"
    return venv_dir / ".servers" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def previous(venv_dir: Path, package_root: Path | None, instance: str) -> dict[str, Any] | None:
    """The last recorded build of ``instance``: ``{"digest", "inputs"}``, or None."""
    try:
        data = json.loads(_record(venv_dir, package_root, instance).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("inputs"), dict) else None


def remember(venv_dir: Path, package_root: Path | None, instance: str, digest: str, inputs: dict[str, Any]) -> None:
    """Record that ``instance`` now runs in the venv of ``digest`` built from ``inputs`` (atomic;
    a failure to write only costs the next build its reasons)."""
    path = _record(venv_dir, package_root, instance)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"instance": instance, "digest": digest, "inputs": inputs}, default=str)
    except OSError:
        pass


def _install_lines(old: Any, new: Any, rel_file: str) -> list[str]:
    """The requirement lines (``VenvPlan.inputs["install"]``: the non-empty lines uv is given) that
    changed, were added or removed."""
    a = old if isinstance(old, list) else str(old or "").splitlines()
    b = new if isinstance(new, list) else str(new or "").splitlines()
    out: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        pairs = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        out += [f"{rel_file}: `{a[i1 + k]}` -> `{b[j1 + k]}`" for k in range(pairs)]
        out += [f"{rel_file}: removed `{x}`" for x in a[i1 + pairs : i2]]
        out += [f"{rel_file}: added `{y}`" for y in b[j1 + pairs : j2]]
    if len(out) > MAX_LINES:
        out = out[:MAX_LINES] + [f"... and {len(out) - MAX_LINES} more change(s) in {rel_file}"]
    return out


def _pool(old: list[list[str]], new: list[list[str]]) -> list[str]:
    a = {p[0]: p[1] for p in old}
    b = {p[0]: p[1] for p in new}
    out = [
        f"wheels/{n} changed: sha256 {a[n][:12]}... -> {b[n][:12]}... (same file name, new contents)"
        for n in sorted(a.keys() & b.keys())
        if a[n] != b[n]
    ]
    out += [f"wheels/{n} added" for n in sorted(b.keys() - a.keys())]
    out += [f"wheels/{n} removed" for n in sorted(a.keys() - b.keys())]
    return out


def _pins(old: list[list[Any]], new: list[list[Any]]) -> list[str]:
    a, b = {p[0] for p in old}, {p[0] for p in new}
    if a == b:
        return ["injected pins switched between installed and constraint-only (pin mode)"] if old != new else []
    return [f"injected pins: {', '.join(sorted(a - b)) or '(none)'} -> {', '.join(sorted(b - a)) or '(none)'}"]


def rebuild_reasons(old: dict[str, Any], new: dict[str, Any], rel_file: str) -> list[str]:
    """What differs between two digest-input dicts (``VenvPlan.inputs``), in words; ``[]`` when
    nothing does (the same inputs built again, e.g. after the old venv was removed)."""
    out: list[str] = []
    if old.get("install_kind") != new.get("install_kind"):
        out.append(f"install file kind {old.get('install_kind')} -> {new.get('install_kind')}")
    if old.get("install") != new.get("install"):
        out += _install_lines(old.get("install"), new.get("install"), rel_file)
    if old.get("overrides") != new.get("overrides"):
        out += _install_lines(
            old.get("overrides") or [],
            new.get("overrides") or [],
            rel_file.rsplit("/", 1)[0] + "/overrides.txt" if "/" in rel_file else "overrides.txt",
        )
    out += _pool(old.get("pool", []), new.get("pool", []))
    if old.get("python") != new.get("python"):
        (op, _, ov), (np_, _, nv) = old.get("python", ["?", "", "?"]), new.get("python", ["?", "", "?"])
        out.append(f"Python {ov} ({op}) -> {nv} ({np_})")
    if old.get("pins") != new.get("pins"):
        out += _pins(old.get("pins", []), new.get("pins", []))
    if old.get("uv") != new.get("uv"):
        out.append(f"uv {old.get('uv')} -> {new.get('uv')}")
    if old.get("hash_mode") != new.get("hash_mode"):
        out.append("hash checking (--require-hashes) turned " + ("on" if new.get("hash_mode") else "off"))
    if old.get("index") != new.get("index"):
        shown = {k: redact_url(v) for k, v in (new.get("index") or {}).items()}
        out.append(f"uv index settings changed (now: {shown or 'uv defaults'})")
    local_old, local_new = old.get("local", {}), new.get("local", {})
    out += [f"local project {p} changed" for p in sorted(local_new) if local_old.get(p) != local_new[p]]
    known = {
        "install_kind",
        "install",
        "overrides",
        "pool",
        "python",
        "pins",
        "uv",
        "hash_mode",
        "index",
        "local",
        "closure",
    }
    if not out and any(old.get(k) != new.get(k) for k in (old.keys() | new.keys()) - known):
        out.append("the runtime's venv layout changed")
    return out
