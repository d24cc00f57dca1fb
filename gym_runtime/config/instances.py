"""Find server instances in the merged config and check their shape (docs/architecture.md §4).

A server instance is a top-level key ``<instance>: {<server_type>: {<implementation>: {entrypoint, ...}}}``
(Gym's ``config_types.py``). Rules checked here, each a violation naming the instance and file:
one server type and one implementation per instance (case C03b names both implementations and
their files), instance names matching ``[A-Za-z0-9_-]+`` (case C22: ``.`` is OmegaConf's path
separator), an ``entrypoint`` (a missing one names a misspelt key, by difflib) that is relative and
inside the server dir, a resources server ``domain`` from
Gym's closed set, the reserved ``placement`` block (:mod:`gym_runtime.config.placement`), the
implementation directory found in the package or the built-in ``servers/``, no two instances
with the same explicit port (case C04), and a server type the Gym release the environment runs
has (``GR-CONFIG-SERVER-TYPE``: an ``environment_servers`` instance under a release before 0.7,
naming the instance, the release and the pin to change).

Instances are found for the server types of every release line the runtime knows
(:func:`~gym_runtime.gym_release.known_server_types`), so a block of a type the chosen release lacks
is reported rather than silently taken for a plain top-level key.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from gym_runtime.config.placement import placement_problems
from gym_runtime.config.sources import Sources
from gym_runtime.errors import Violation
from gym_runtime.gym_release import GymRelease, first_release_with
from gym_runtime.package.layout import SERVER_TYPES, ServerDir, is_regular_file

NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
DOMAINS = (
    "math",
    "coding",
    "agent",
    "knowledge",
    "instruction_following",
    "long_context",
    "safety",
    "games",
    "translation",
    "e2e",
    "rlhf",
    "other",
)
# Reserved top-level keys of Gym's global config (NeMo Gym 0.4.0 `nemo_gym/global_config.py`, reserved top-level keys): never instances.
RESERVED = {
    "config_paths",
    "entrypoint",
    "default_host",
    "head_server",
    "disallowed_ports",
    "head_server_deps",
    "python_version",
    "ray_head_node_address",
    "port_range_low",
    "port_range_high",
    "policy_base_url",
    "policy_api_key",
    "policy_model_name",
}

# Keys of an instance's block that the runtime reads and no Gym server does: the `placement:` block
# (gym_runtime/config/placement.py), a resources server's `reward_range` (dry-run) and a server's
# own `python_version` (its venv's interpreter). Servers never see them: Gym 0.7's server configs
# are pydantic models with extra="forbid", where an unknown key stops the server at start
# (gym_runtime/supervise/contract.py drops them from every view a server or Gym client reads).
RUNTIME_INSTANCE_KEYS = ("placement", "reward_range", "python_version")


@dataclass(frozen=True)
class ServerInstance:
    """One configured server: ``name`` (instance), ``server_type``, ``implementation``, its inner
    config mapping (resolved), the server directory and the file that defined it."""

    name: str
    server_type: str
    implementation: str
    entrypoint: str
    server_dir: ServerDir
    config: dict[str, Any] = field(hash=False)
    source: str | None = None

    @property
    def port(self) -> int | None:
        p = self.config.get("port")
        return p if isinstance(p, int) else None

    @property
    def host(self) -> str | None:
        h = self.config.get("host")
        return h if isinstance(h, str) else None


@dataclass(frozen=True)
class Declared:
    """An instance as declared in the config, before its server directory is looked up."""

    name: str
    server_type: str
    implementation: str
    config: dict[str, Any] = field(hash=False)


def _is_candidate(value: Any) -> bool:
    return isinstance(value, dict) and any(k in SERVER_TYPES for k in value)


def find_instances(raw: dict[str, Any], sources: Sources) -> list[Violation]:
    """Shape checks that need no resolution (run before interpolations are resolved): names and
    one type / one implementation per instance."""
    out: list[Violation] = []
    for name, value in raw.items():
        if name in RESERVED or not _is_candidate(value):
            continue
        file = sources.of(name)
        if not NAME_RE.match(name):
            fixed = re.sub(r"[^A-Za-z0-9_-]", "_", name)
            why = (
                "contains '.', which config paths and ${...} references treat as a separator"
                if "." in name
                else "may only use letters, digits, '_' and '-'"
            )
            out.append(
                Violation(
                    "GR-CONFIG-INSTANCE-NAME",
                    f"server instance name {name!r} ({file}) {why}",
                    file=file,
                    key=name,
                    hint=f"rename it (e.g. {fixed!r}) and update every reference to it",
                )
            )
        types = [k for k in value if k in SERVER_TYPES]
        if len(types) > 1 or len(value) > 1:
            out.append(
                Violation(
                    "GR-CONFIG-INSTANCE-SHAPE",
                    f"instance {name!r} must hold exactly one server type key, has {sorted(map(str, value))}",
                    file=file,
                    key=name,
                )
            )
            continue
        impls = value[types[0]]
        if not isinstance(impls, dict) or not impls:
            out.append(
                Violation(
                    "GR-CONFIG-INSTANCE-SHAPE",
                    f"instance {name!r}: {types[0]} must map an implementation name to its config",
                    file=file,
                    key=f"{name}.{types[0]}",
                )
            )
        elif len(impls) > 1:
            parts = [f"{impl} ({sources.of(f'{name}.{types[0]}.{impl}') or '?'})" for impl in impls]
            out.append(
                Violation(
                    "GR-CONFIG-TWO-IMPLEMENTATIONS",
                    f"server instance {name} has {len(impls)} "
                    f"implementations under {types[0]}: {', '.join(parts)}; exactly one is allowed",
                    file=file,
                    key=f"{name}.{types[0]}",
                    hint="configs were deep-merged by instance name: "
                    "remove one of them, or give one of the instances another name",
                )
            )
    return out


def declare(config: dict[str, Any]) -> dict[str, Declared]:
    """Every well-shaped instance of ``config`` (resolved or not), by name."""
    out: dict[str, Declared] = {}
    for name, value in config.items():
        if name in RESERVED or not _is_candidate(value) or len(value) != 1:
            continue
        stype = next(iter(value))
        if isinstance(value[stype], dict) and len(value[stype]) == 1:
            impl, inner = next(iter(value[stype].items()))
            if isinstance(inner, dict):
                out[name] = Declared(name, stype, impl, inner)
    return out


def _no_implementation(
    name: str, stype: str, impl: str, entry: Any, known: list[str], configs_only: bool
) -> tuple[str, str]:
    """``(message, hint)`` for an implementation found nowhere. The hint is the whole fix (the
    entrypoint *and* an install file), so following it never leads to a second error."""
    app = entry if _good_entry(entry) else "app.py"
    near = difflib.get_close_matches(impl, known, n=1, cutoff=0.6)
    builtin = f"use a built-in implementation ({', '.join(known) or 'none for ' + stype})" + (
        f"; did you mean {near[0]!r}?" if near else ""
    )
    ship = f"add {stype}/{impl}/{app} (the entrypoint) and {stype}/{impl}/requirements.txt (a comment line is fine)"
    if configs_only:
        return (
            f"implementation {impl!r} of instance {name!r}: {stype}/{impl}/ in the package holds only configs/, "
            f"which configures a built-in server, and there is no built-in {impl!r}",
            f"to ship the server, {ship}; or {builtin}",
        )
    return (
        f"implementation {impl!r} of instance {name!r} is neither a directory {stype}/{impl}/ in the package "
        "nor a built-in server",
        f"{builtin}; or {ship}",
    )


def server_type_problem(name: str, stype: str, release: GymRelease, file: str | None) -> Violation | None:
    """``GR-CONFIG-SERVER-TYPE`` when ``release`` has no server type ``stype`` (an
    ``environment_servers`` instance under the 0.4 line), else None. The hint names the pin (or the
    vendored SDK) that would give the environment a release with that type."""
    if stype in release.server_types:
        return None
    first = first_release_with(stype) or "a newer release"
    if release.source.startswith("wheels/"):
        change = f"vendor nemo-gym {first} or newer into wheels/ (it replaces {release.source})"
    else:
        change = f"run it with GYM_RUNTIME_PIN_NEMO_GYM={first} or newer (the release now comes from {release.source})"
    return Violation(
        "GR-CONFIG-SERVER-TYPE",
        f"server instance {name!r} has server type {stype}, but NeMo Gym "
        f"{release.version} (release line {release.line}) has no {stype}: its server types are "
        f"{', '.join(release.server_types)}; {stype} arrived in NeMo Gym {first}",
        file=file,
        key=f"{name}.{stype}",
        hint=f"{change}, or remove the instance for a release without {stype}",
    )


def build_instances(
    resolved: dict[str, Any],
    sources: Sources,
    package_dirs: dict[tuple[str, str], ServerDir],
    builtin_dirs: dict[tuple[str, str], ServerDir],
    package_root: Path | None = None,
    release: GymRelease | None = None,
) -> tuple[dict[str, ServerInstance], dict[str, Declared], list[Violation]]:
    """Build :class:`ServerInstance` objects from the resolved config (shape already checked).

    The implementation directory is looked up in the package (under ``package_root``) first,
    then in the built-ins. An instance of a server type ``release`` does not have is a
    ``GR-CONFIG-SERVER-TYPE`` violation (:func:`server_type_problem`). Returns the instances,
    every declared instance (also those with problems) and violations.
    """
    instances: dict[str, ServerInstance] = {}
    declared: dict[str, Declared] = {}
    out: list[Violation] = []
    ports: dict[int, tuple[str, str | None]] = {}
    for name, value in resolved.items():
        if name in RESERVED or not _is_candidate(value):
            continue
        stype = next(iter(value))
        impl, inner = next(iter(value[stype].items()))
        key = f"{name}.{stype}.{impl}"
        file = sources.of(key)
        if not isinstance(inner, dict):
            out.append(
                Violation("GR-CONFIG-INSTANCE-SHAPE", "implementation config must be a mapping", file=file, key=key)
            )
            continue
        declared[name] = Declared(name, stype, impl, inner)
        wrong_type = server_type_problem(name, stype, release, sources.of(name)) if release is not None else None
        if wrong_type is not None:  # its implementation and keys would be reported against the wrong release
            out.append(wrong_type)
            continue
        problems = _inner_problems(name, stype, inner, key, file, ports, sources)
        out += problems
        entry = inner.get("entrypoint")
        sdir = package_dirs.get((stype, impl)) or builtin_dirs.get((stype, impl))
        if sdir is None:
            known = sorted(i for (t, i) in {**builtin_dirs, **package_dirs} if t == stype)
            configs_only = package_root is not None and (package_root / stype / impl / "configs").is_dir()
            message, hint = _no_implementation(name, stype, impl, entry, known, configs_only)
            out.append(Violation("GR-CONFIG-IMPLEMENTATION", message, file=file, key=key, hint=hint))
            continue
        if _good_entry(entry) and not is_regular_file(sdir.path / entry):
            out.append(
                Violation(
                    "GR-CONFIG-ENTRYPOINT",
                    f"entrypoint {entry!r} does not exist in {stype}/{impl}/ ({sdir.origin})",
                    file=file,
                    key=f"{key}.entrypoint",
                )
            )
            continue
        if not problems and isinstance(entry, str):  # a missing entrypoint is one of the problems
            instances[name] = ServerInstance(name, stype, impl, entry, sdir, inner, file)
    return instances, declared, out


def python_version_problems(value: Any, key: str, file: str | None) -> list[Violation]:
    """An unquoted ``python_version: 3.10`` is the YAML number 3.1: refuse the numbers that
    lost a trailing zero (3.1, 3.2); other numbers (3.12, 3.13) mean what they say."""
    if isinstance(value, float) and str(value).split(".")[1] in ("1", "2"):
        return [
            Violation(
                "GR-CONFIG-PYTHON-VERSION",
                f"python_version is the number {value!r}: YAML reads an unquoted {value}0 as {value}",
                file=file,
                key=key,
                hint=f'write it as a string, e.g. python_version: "{value}0"',
            )
        ]
    return []


def _good_entry(entry: Any) -> TypeGuard[str]:
    return isinstance(entry, str) and bool(entry) and not entry.startswith("/") and ".." not in Path(entry).parts


def _inner_problems(
    name: str,
    stype: str,
    inner: dict[str, Any],
    key: str,
    file: str | None,
    ports: dict[int, tuple[str, str | None]],
    sources: Sources,
) -> list[Violation]:
    """Checks that need no server directory: entrypoint shape, domain, port (``ports`` is updated)."""
    out: list[Violation] = []
    entry = inner.get("entrypoint")
    if "entrypoint" not in inner:
        near = difflib.get_close_matches("entrypoint", [str(k) for k in inner], n=1, cutoff=0.75)
        out.append(
            Violation(
                "GR-CONFIG-ENTRYPOINT",
                f"instance {name!r} has no `entrypoint`" + (f" (it has an unknown key `{near[0]}`)" if near else ""),
                file=file,
                key=f"{key}.entrypoint",
                hint=f"did you mean `entrypoint` instead of `{near[0]}`?"
                if near
                else "Gym servers use `entrypoint: app.py`",
            )
        )
    elif not _good_entry(entry):
        out.append(
            Violation(
                "GR-CONFIG-ENTRYPOINT",
                f"entrypoint must be a relative path inside the server directory, got {entry!r}",
                file=file,
                key=f"{key}.entrypoint",
                hint="Gym servers use `entrypoint: app.py`",
            )
        )
    if stype == "resources_servers" and inner.get("domain") not in DOMAINS:
        got = inner.get("domain")
        out.append(
            Violation(
                "GR-CONFIG-DOMAIN",
                f"resources server {name!r} needs a domain from Gym's closed set, got {got!r}"
                if "domain" in inner
                else f"resources server {name!r} has no domain (Gym would report it as an almost-server and abort)",
                file=file,
                key=f"{key}.domain",
                hint=f"use one of: {', '.join(DOMAINS)}",
            )
        )
    out += python_version_problems(
        inner.get("python_version"), f"{key}.python_version", sources.of(f"{key}.python_version")
    )
    out += placement_problems(inner, key, sources)
    port = inner.get("port")
    if port is not None and not isinstance(port, str):  # a string port is a GR-CONFIG-TYPE problem (types.py)
        pfile = sources.of(f"{key}.port")
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            out.append(
                Violation(
                    "GR-CONFIG-PORT", f"port must be an integer 1-65535, got {port!r}", file=pfile, key=f"{key}.port"
                )
            )
        elif port in ports:
            other, ofile = ports[port]
            out.append(
                Violation(
                    "GR-CONFIG-PORT-DUPLICATE",
                    f"port {port} is used by both {other!r} ({ofile}) and {name!r} ({pfile})",
                    file=pfile,
                    key=f"{key}.port",
                    hint="give one of them another port, or remove `port` to have one assigned",
                )
            )
        else:
            ports[port] = (name, pfile)
    return out
