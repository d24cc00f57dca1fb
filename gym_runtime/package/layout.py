"""Package layout rules that need the filesystem (docs/architecture.md §3).

- every ``config_paths`` entry exists, is a regular file, is not (and is not reached through) a
  symlink, and stays inside the package after resolution;
- no ``.jsonl`` anywhere (datasets are a separate input);
- each ``{server_type}/{implementation}/`` directory, nested ones included
  (``{server_type}/{group}/{implementation}/``, :func:`find_server_dirs`) (for the server types of every Gym release
  line the runtime knows, ``environment_servers`` included: which types a release runs is the
  config stage's check) holds exactly one of ``requirements.txt`` / ``pyproject.toml`` — a directory with neither is reported, since a built-in of the same name
  would otherwise silently shadow it (NeMo Gym's configuration rules for environment packages).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gym_runtime.errors import Violation

# Every server type of every Gym release line the runtime knows, oldest line's first (the union of
# the profiles' `server_types`, `gym_runtime.gym_release.known_server_types()`; a test holds them equal).
SERVER_TYPES = ("responses_api_models", "responses_api_agents", "resources_servers", "environment_servers")
INSTALL_FILES = ("requirements.txt", "pyproject.toml")
_SKIP_DIRS = {".git", ".venv", "__pycache__", ".gym-runtime"}


@dataclass(frozen=True)
class ServerDir:
    """A Gym server tree ``{server_type}/{implementation}/`` with its install file.

    ``origin`` is ``"package"`` or ``"builtin"`` (the runtime's ``servers/``).
    """

    server_type: str
    implementation: str
    path: Path
    install_file: Path
    origin: str


def check_config_paths(root: Path, config_paths: list[str]) -> tuple[list[Path], list[Violation]]:
    """Resolve each manifest ``config_paths`` entry under ``root``; return the files and violations."""
    files, v = [], []
    real_root = root.resolve()
    for i, rel in enumerate(config_paths):
        key = f"config_paths[{i}]"
        p = root / rel
        chain = [root / "/".join(rel.split("/")[: n + 1]) for n in range(len(rel.split("/")))]
        links = [c for c in chain if is_link(c)]
        if links:
            v.append(
                Violation(
                    "GR-PKG-CONFIG-SYMLINK",
                    f"config symlinks are not allowed: {rel} (symlink: {links[0].relative_to(root).as_posix()})",
                    file="nemo-environment.yaml",
                    key=key,
                    hint="copy the file into the package",
                )
            )
        if not _inside(p, real_root):
            v.append(
                Violation(
                    "GR-PKG-CONFIG-ESCAPE",
                    f"config path escapes the package root after resolving symlinks: {rel}",
                    file="nemo-environment.yaml",
                    key=key,
                )
            )
        if links:
            continue
        if not is_regular_file(p):
            v.append(
                Violation(
                    "GR-PKG-CONFIG-MISSING",
                    f"config_paths references a file that is not in the package: {rel}",
                    file="nemo-environment.yaml",
                    key=key,
                    hint="fix the path (relative to the package root) or add the file",
                )
            )
            continue
        files.append(p)
    return files, v


def _inside(p: Path, real_root: Path) -> bool:
    """False only when ``p`` resolves outside ``real_root``; a path that cannot be resolved at all
    (a symlink loop, a name too long) does not escape."""
    try:
        return p.resolve().is_relative_to(real_root)
    except (OSError, RuntimeError, ValueError):
        return True


def is_link(p: Path) -> bool:
    """``Path.is_symlink`` that answers False instead of raising (name too long, NUL byte, ...)."""
    try:
        return p.is_symlink()
    except (OSError, ValueError):
        return False


def is_regular_file(p: Path) -> bool:
    """``Path.is_file`` that answers False instead of raising (name too long, symlink loop, ...)."""
    try:
        return p.is_file()
    except (OSError, ValueError):
        return False


def find_jsonl(root: Path) -> list[Violation]:
    """One violation per ``.jsonl`` file anywhere in the package."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for f in sorted(filenames):
            if f.lower().endswith(".jsonl"):
                rel = (Path(dirpath) / f).relative_to(root).as_posix()
                out.append(
                    Violation(
                        "GR-PKG-JSONL",
                        "JSONL files must not live in an environment package",
                        file=rel,
                        hint="move dataset rows out of the package and pass them with "
                        "--dataset (dry-run) or as a separate dataset",
                    )
                )
    return out


def find_server_dirs(root: Path, origin: str = "package") -> tuple[dict[tuple[str, str], ServerDir], list[Violation]]:
    """Find ``{server_type}/{implementation}/`` trees under ``root``.

    An implementation may be nested (NeMo Gym 0.7.0 names ``conversational_tool_use/simulation``,
    whose tree is ``responses_api_agents/conversational_tool_use/simulation/``: Gym's launcher
    joins the server type and the name as a path): below a server type, a subdirectory that holds
    an install file is an implementation named by its path, whether its parent is a server
    (which may hold one, as Gym's ``conversational_tool_use/`` does) or a directory that only
    groups servers (then no violation). Returns the server dirs keyed by ``(server_type,
    implementation)`` and a violation for each directory with both install files, or with neither
    that is not configs-only and groups no server.
    """
    found: dict[tuple[str, str], ServerDir] = {}
    v: list[Violation] = []
    for st in SERVER_TYPES:
        base = root / st
        if base.is_dir():
            for d in _subdirs(base):
                _scan(root, st, d, origin, found, v)
    return found, v


def _subdirs(d: Path) -> list[Path]:
    return [
        c for c in sorted(d.iterdir()) if c.is_dir() and not c.name.startswith((".", "_")) and c.name not in _SKIP_DIRS
    ]


def _installs(d: Path) -> list[str]:
    return [f for f in INSTALL_FILES if (d / f).is_file()]


def _scan(
    root: Path, st: str, d: Path, origin: str, found: dict[tuple[str, str], ServerDir], v: list[Violation]
) -> None:
    """One directory below server type ``st`` (module doc), and the nested implementations in it."""
    rel = d.relative_to(root).as_posix()
    if d.is_symlink() and not _inside(d, root.resolve()):
        v.append(
            Violation(
                "GR-PKG-ESCAPE",
                "server directory is a symlink to outside the package",
                file=rel,
                hint="copy the server into the package",
            )
        )
        return
    present = _installs(d)
    nested = [c for c in _subdirs(d) if _installs(c)]
    if len(present) == 2:
        v.append(
            Violation(
                "GR-PKG-SERVER-BOTH",
                "server directory has both requirements.txt and pyproject.toml",
                file=rel + "/",
                hint="keep exactly one of them",
            )
        )
    elif present:
        impl = d.relative_to(root / st).as_posix()
        found[(st, impl)] = ServerDir(st, impl, d, d / present[0], origin)
    elif not nested and not _only_configs(d):  # configs-only: native-v1 configs for a built-in server
        app = "" if any(d.glob("*.py")) else " and the server's entrypoint (Gym servers use app.py)"
        v.append(
            Violation(
                "GR-PKG-SERVER-NO-INSTALL",
                "server directory has neither requirements.txt "
                "nor pyproject.toml, so it is not a server and a built-in of the same name "
                "would silently shadow it",
                file=rel + "/",
                hint=f"add a requirements.txt (a comment line is fine){app}, or rename the directory",
            )
        )
    for c in nested:
        _scan(root, st, c, origin, found, v)


def _only_configs(d: Path) -> bool:
    """True for a directory that holds nothing but ``configs/`` (and docs): it configures a built-in."""
    names = {p.name for p in d.iterdir()}
    return bool(names) and names <= {"configs", "README.md"} and (d / "configs").is_dir()
