"""Turn a failed build step into one :class:`~gym_runtime.errors.BuildError` block.

Every diagnosis names the server(s), the stage, the file, the cause (uv's own error block,
complete, plus what we worked out) and the fix, and points at the log. Recognised causes
(docs/architecture.md §5 and the issue; each has a case test):

====================================  ===========================================================
code                                  when
====================================  ===========================================================
``GR-BUILD-HASH``                     hash mismatch or missing hash (C16)
``GR-BUILD-YANKED``                   a dependency pinned to a yanked release (C15)
``GR-BUILD-WHEEL-TAGS``               no wheel for this Python/platform; each file's tags (C12)
``GR-BUILD-PIN-MISSING``              an injected pin's version exists nowhere (C09)
``GR-BUILD-PIN-CONFLICT``             an injected pin conflicts with the requirements (C07)
``GR-BUILD-CLOSURE``                  wheels/ lacks part of the closure (offline proof before stage 1)
``GR-BUILD-MISSING``                  a requirement (stage 1) or closure member (stage 2) not found (C01)
``GR-BUILD-SDIST-BACKEND``            a build backend is not available offline (C10)
``GR-BUILD-NEEDS-NETWORK``            an offline stage wanted the network (C11)
``GR-BUILD-WHEEL-METADATA``           uv refused a wheel whose file name and METADATA disagree (C50)
``GR-BUILD-UV``                       anything else (uv's words, verbatim)
====================================  ===========================================================
"""

from __future__ import annotations

import platform
import re
from collections.abc import Mapping
from pathlib import Path

from packaging.utils import canonicalize_name

from gym_runtime.errors import BuildError
from gym_runtime.venvs.closure import ClosureTarget, gap, platform_of, roots_of
from gym_runtime.venvs.index import default_index, versions
from gym_runtime.venvs.plan import VenvPlan
from gym_runtime.venvs.stages import StepFailure
from gym_runtime.venvs.tags import abi_tag, highest_platform, rejection

STAGES = {
    "venv": "create the venv",
    "closure": "stage 2: prove wheels/ holds the whole closure (offline)",
    "stage1": "stage 1: install requirements + pins (index enabled)",
    "stage2": "stage 2: install the vendored closure offline",
    "verify": "verify the installed set",
}
_NAME = r"`?([A-Za-z0-9][A-Za-z0-9._\-]*)(?:\[[^\]]*\])?`?"


def uv_error_block(output: str) -> str:
    """uv's error lines (from the first ``error:`` on), or the output's tail."""
    lines = [ln for ln in output.splitlines() if not ln.startswith("[exit status")]
    for i, ln in enumerate(lines):
        if ln.startswith("error:"):
            return "\n".join(lines[i:]).strip()
    return "\n".join(lines[-25:]).strip()


def _line_ref(vp: VenvPlan, name: str) -> str:
    """Where ``name`` is asked for: its install-file line, else its ``overrides.txt`` line."""
    ln = vp.source.line_of(name)
    if ln:
        return f" ({vp.source.where(ln)}: `{ln.text}`)"
    ov = vp.overrides.line_of(name) if vp.overrides is not None else None
    return f" ({vp.rel_overrides} line {ov.lineno}: `{ov.text}`, an override)" if ov else ""


def _file_of(vp: VenvPlan, name: str) -> str:
    """The file to fix for ``name``: ``overrides.txt`` when an override sets it, else the install file."""
    ov = vp.overrides.line_of(name) if vp.overrides is not None else None
    return vp.rel_overrides if ov and vp.rel_overrides else vp.rel_file


def _pool_listing(vp: VenvPlan, name: str) -> str:
    files = vp.pool_of(name)
    return ", ".join(sorted({f.version for f in files})) if files else "none"


def _hash(vp: VenvPlan, text: str) -> tuple[str, str, str] | None:
    m = re.search(r"Hash mismatch for " + _NAME, text)
    if m:
        name = m.group(1).split("==")[0]
        files = vp.pool_of(name)
        where = ", ".join(f"wheels/{f.path.name} (sha256:{f.sha256})" for f in files) or "the downloaded file"
        return (
            "GR-BUILD-HASH",
            f"hash mismatch for {name}: {where} does not match the --hash{_line_ref(vp, name)}",
            f"the file was rebuilt or replaced: update the --hash in {vp.rel_file}, or restore the original file",
        )
    m = re.search(r"no trusted hash was provided for: " + _NAME, text) or re.search(
        r"all requirements must have a hash, but none were provided for: " + _NAME, text
    )
    if m:
        name = canonicalize_name(m.group(1).split("==")[0])
        files = vp.pool_of(name)
        paste = "; ".join(f"`{name}=={f.version} --hash=sha256:{f.sha256}` (wheels/{f.path.name})" for f in files)
        pin = vp.pin_of(name)
        who = (
            f" (injected pin {pin.requirement}, {pin.origin})"
            if pin
            else " (a transitive dependency)"
            if not vp.source.line_of(name)
            else _line_ref(vp, name)
        )
        return (
            "GR-BUILD-HASH",
            f"{vp.rel_file} uses --hash, so every installed distribution needs a hash, but {name}{who} has none",
            f"add {paste} to {vp.rel_file}"
            if paste
            else f"add `{name}==<version> --hash=sha256:<sha256>` to {vp.rel_file}",
        )
    return None


def _pins(vp: VenvPlan, text: str, stage: str, honoured: Mapping[str, str]) -> tuple[str, str, str] | None:
    if "No solution found" not in text:
        return None
    for pin in vp.pins:
        if not re.search(rf"(?<![\w-]){re.escape(pin.name)}(?![\w-])", text, re.I):
            continue
        if re.search(rf"no version of {re.escape(pin.name)}|{re.escape(pin.name)} was not found", text, re.I):
            index = default_index(honoured) if stage == "stage1" else None
            on_index = (", ".join(versions(index, pin.name)) or "none") if index else "not consulted (offline)"
            return (
                "GR-BUILD-PIN-MISSING",
                f"the injected pin {pin.requirement} ({pin.origin}) cannot be "
                f"satisfied: versions on the index: {on_index}; in wheels/: {_pool_listing(vp, pin.name)}",
                f"ship {pin.name.replace('-', '_')}-{pin.version}-*.whl in wheels/, or change the runtime's "
                f"pin; gym-runtime never relaxes a pin to another version",
            )
        chain = re.search(
            rf"(?:versions of|only) {_NAME}(?:==\S+)? depends? on "
            rf"({re.escape(pin.name)}[<>=!~][^\s,]*)",
            text,
            re.I,
        )
        via = ""
        if chain:
            dep = chain.group(1)
            via = f"; it conflicts with {dep} -> {chain.group(2)}{_line_ref(vp, dep)}"
        return (
            "GR-BUILD-PIN-CONFLICT",
            f"the injected pin {pin.requirement} ({pin.origin}) is unsatisfiable with the server's requirements{via}",
            f"align the runtime's {pin.name} version with what the server allows (e.g. set the pin "
            f"variable to a compatible version), or set GYM_RUNTIME_PIN_MODE=none to inject no pins",
        )
    return None


def _tags(vp: VenvPlan, text: str) -> tuple[str, str, str] | None:
    if not re.search(
        r"matching (Python ABI|platform|Python implementation) tag|wheel for the current platform|"
        r"no wheels? (are )?available",
        text,
    ):
        return None
    names = {canonicalize_name(m) for m in re.findall(r"(?:Because )?" + _NAME + r"(?:==\S+)? has no wheels", text)}
    names |= {canonicalize_name(m) for m in re.findall(_NAME + r"(?:==\S+)? can't be installed", text)}
    reasons = [
        f"wheels/{f.path.name}: {r}"
        for n in sorted(names)
        for f in vp.pool_of(n)
        if (r := rejection(f.path.name, vp.python))
    ]
    target = f"{vp.python.implementation} {vp.python.version} ({abi_tag(vp.python)}), up to {highest_platform()}"
    detail = ("; ".join(reasons)) if reasons else "no file for it matches"
    return (
        "GR-BUILD-WHEEL-TAGS",
        f"no installable wheel of {', '.join(sorted(names)) or 'a dependency'} for {target}: {detail}",
        f"vendor wheels built for {target} (or py3-none-any wheels); "
        "`gym-runtime vendor PKG --platform linux/amd64 --python X.Y` picks matching files",
    )


def _missing(vp: VenvPlan, text: str, stage: str) -> tuple[str, str, str] | None:
    m = re.search(
        r"(?:there is no version of|Because) " + _NAME + r"(?:[<>=!~]=?[^\s,]*)?"
        r"(?: was not found in the (?:package registry|provided package locations)|(?=\s+and|,))",
        text,
    )
    if not m or "not found" not in text and "no version of" not in text:
        return None
    name = canonicalize_name(m.group(1))
    if stage == "stage2":
        return (
            "GR-BUILD-MISSING",
            f"{name} is missing from the vendored closure (wheels/ has: "
            f"{_pool_listing(vp, name)}), and the offline stage cannot fetch it",
            f"vendor {name} into wheels/ (`gym-runtime vendor PKG --platform ... --python ...`)",
        )
    return (
        "GR-BUILD-MISSING",
        f"{name} cannot be found on the index or in wheels/{_line_ref(vp, name)}",
        f"check the spelling and version of {name} in {_file_of(vp, name)}",
    )


def _overrides_named(vp: VenvPlan, block: str, what: str) -> str:
    """A clause naming the ``overrides.txt`` lines of the distributions uv's error mentions (an
    override is the requirement uv resolved, whoever asked for the distribution); ``""``: none."""
    if vp.overrides is None or "an override)" in what:
        return ""
    named = [
        ln
        for ln in vp.overrides.lines
        if ln.name and re.search(rf"(?<![\w.-]){re.escape(ln.name)}(?![\w-])", block.replace("_", "-"), re.I)
    ]
    if not named:
        return ""
    return "; under the overrides " + ", ".join(f"{vp.rel_overrides} line {ln.lineno} `{ln.text}`" for ln in named)


def closure_failure(vp: VenvPlan, block: str, package_root: Path | None = None) -> tuple[str, str, str, dict]:
    """``(code, what, fix, extra)`` for a failed closure check: the project wheels/ lacks, the
    chain needing it, and the ``gym-runtime vendor`` command for this interpreter and platform."""
    py = ".".join(vp.python.version.split(".")[:2])
    target = ClosureTarget(py, platform_of(platform.machine()))
    pins = [(p.requirement, p.as_constraint) for p in vp.pins]
    found = gap(block, vp.wheels_dir, roots_of(vp.source, pins), vp.server_dir.name, target) if vp.wheels_dir else None
    where = f"CPython {py} {target.platform}"
    vendor = f"gym-runtime vendor {package_root or 'PKG'} --platform {target.platform} --python {py}"
    if found is None:
        return (
            "GR-BUILD-CLOSURE",
            f"wheels/ does not hold the whole closure for {where} (uv's own words are in cause)",
            f"vendor the closure: `{vendor}`",
            {},
        )
    return (
        "GR-BUILD-CLOSURE",
        f"wheels/ does not hold the whole closure for {where}: " + found.describe(_pool_listing(vp, found.project)),
        f"vendor the closure: `{vendor}` (or add a wheel of {found.project} for {where} to wheels/)",
        {"missing": found.project, "chain": list(found.chain)},
    )


def diagnose(
    vp: VenvPlan, failure: StepFailure, honoured: Mapping[str, str] | None = None, package_root: Path | None = None
) -> BuildError:
    """The one error block for a failed step of ``vp``; ``honoured``: uv's index settings in force;
    ``package_root`` names the package in the ``vendor`` fix of a closure gap."""
    out = failure.result.output
    block = uv_error_block(out)
    stage = failure.stage
    found = None
    more: dict = {}
    if stage == "closure":  # the proof of stage 2: tags and injected pins keep their own diagnosis
        code, what, fix, more = closure_failure(vp, block, package_root)
        pin = vp.pin_of(more.get("missing", "")) if more else None
        found = (
            _tags(vp, block)
            or (_pins(vp, block, "stage1", honoured or {}) if pin and not pin.as_constraint else None)
            or (code, what, fix)
        )
    if stage in ("stage1", "stage2"):
        found = _hash(vp, block)
        if found is None and "was yanked" in block:
            m = re.search(_NAME + r"==(\S+) was yanked", block)
            dep = f"{m.group(1)}=={m.group(2)}" if m else "the yanked release"
            found = (
                "GR-BUILD-YANKED",
                f"a dependency requires {dep}, which is yanked on the index; uv "
                "accepts a yanked release only when it is pinned explicitly",
                f"pin {dep} explicitly in {vp.rel_file}, or ship it in wheels/",
            )
        found = found or _tags(vp, block) or _pins(vp, block, stage, honoured or {})
        if found is None and "build-system.requires" in block:
            found = (
                "GR-BUILD-SDIST-BACKEND",
                "a source distribution or local project needs a build backend that cannot be installed here",
                "ship a wheel instead of the sdist, or add the backend's wheel to wheels/",
            )
        if found is None and (m := re.search(r"Wheel version does not match filename \(([^)]*)\)", block)):
            found = (
                "GR-BUILD-WHEEL-METADATA",
                f"uv refused a wheel whose file name and METADATA disagree on its "
                f"version ({m.group(1)}: METADATA's, then the file name's)",
                "rebuild or rename the wheel so its "
                "file name says what its METADATA says (`gym-runtime validate PKG` names every such file in "
                "wheels/); gym-runtime does not pass uv's switch to skip this check",
            )
        if found is None and re.search(r"network connectivity is disabled", block):
            found = (
                "GR-BUILD-NEEDS-NETWORK",
                "the offline stage needed the network",
                "replace URL/git requirements with name==version from wheels/",
            )
        found = found or _missing(vp, block, stage)
    code, what, fix = found or (
        "GR-BUILD-UV",
        f"uv exited with status {failure.result.returncode}",
        "read the log; the failing command is its first line",
    )
    what += _overrides_named(vp, block, what)
    servers = ", ".join(vp.instances)
    files = vp.rel_file + (f", {vp.rel_overrides}" if vp.rel_overrides else "")
    return BuildError(
        f"venv build failed for {servers} at {STAGES.get(stage, stage)} ({files}): {what}",
        cause=block,
        hint=fix,
        log=failure.result.log,
        code=code,
        extra={
            "server": vp.instances[0],
            "servers": list(vp.instances),
            "stage": "stage2" if stage == "closure" else stage,
            "file": vp.rel_file,
            **({"step": "closure check"} if stage == "closure" else {}),
            **more,
        },
    )
