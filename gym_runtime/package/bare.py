"""A package made of a bare ``config_paths`` list, as NeMo Gym's own launcher reads one: no manifest.

Gym's launcher (NeMo Gym 0.7.0 ``nemo_gym/global_config.py`` ``load_extra_config_paths``,
``nemo_gym/cli/env.py`` ``_resolve_server_dir``) takes each ``config_paths`` entry as a file path
(absolute, or relative to the working directory) and finds each server's tree at
``{server_type}/{implementation}/`` beside it. :func:`package_from_config_paths` builds the same
inputs into a :class:`~gym_runtime.package.loader.Package` value in memory (nothing is written): its
root is the directory that holds the ``{server_type}/`` directories of every listed file, its
manifest a ``native-v1`` one listing the files relative to that root, its server trees the ones
under the root. Every later stage then runs as for a package with a manifest.

Rules that hold for a package but not for Gym's launcher are not applied: a Gym checkout may hold
``.jsonl`` datasets and trees with no install file (those trees simply are not servers).

Errors: :class:`~gym_runtime.errors.PackageInvalidError` listing every entry that is not a file
(``GR-PKG-CONFIG-MISSING``), is not under a ``{server_type}/`` directory (``GR-PKG-CONFIG-PREFIX``),
or lies under another root than the first entry (``GR-PKG-CONFIG-ROOT``); each violation names the
key ``config_paths[i]`` of the global config.
"""

from __future__ import annotations

from pathlib import Path

from gym_runtime.errors import PackageInvalidError, Violation
from gym_runtime.package.layout import SERVER_TYPES, find_server_dirs, is_regular_file
from gym_runtime.package.loader import Package
from gym_runtime.package.manifest import Metadata, NativeManifest

SOURCE = "the global config"  # where the violations point: the caller's config, not a manifest file


def _tree_root(path: Path) -> Path | None:
    """The directory holding the ``{server_type}/`` directory ``path`` lies under (the last one on
    its path), or None."""
    parts = path.parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] in SERVER_TYPES:
            return Path(*parts[:i])
    return None


def package_from_config_paths(config_paths: list[str], cwd: Path, name: str = "gym-config") -> Package:
    """The package of ``config_paths`` (module doc); relative entries are read under ``cwd``.
    Raises :class:`PackageInvalidError` with every problem at once."""
    problems: list[Violation] = []
    if not isinstance(config_paths, list) or not config_paths or not all(isinstance(p, str) for p in config_paths):
        raise PackageInvalidError(
            "config_paths must be a non-empty list of YAML file paths",
            violations=[
                Violation(
                    "GR-PKG-CONFIG-PATH",
                    f"got {config_paths!r}",
                    file=SOURCE,
                    key="config_paths",
                    hint="list the Gym config files, e.g. [resources_servers/x/configs/x.yaml]",
                )
            ],
        )
    files: list[Path] = []
    root: Path | None = None
    for i, entry in enumerate(config_paths):
        key = f"config_paths[{i}]"
        path = (cwd / entry).absolute() if not Path(entry).is_absolute() else Path(entry)
        if not is_regular_file(path):
            problems.append(
                Violation(
                    "GR-PKG-CONFIG-MISSING",
                    f"{entry} is not a file (looked in {cwd} for a relative path)",
                    file=SOURCE,
                    key=key,
                    hint="give the path relative to the working directory, or an absolute one",
                )
            )
            continue
        found = _tree_root(path)
        if found is None:
            problems.append(
                Violation(
                    "GR-PKG-CONFIG-PREFIX",
                    f"{entry} is not under a server type directory "
                    f"({', '.join(SERVER_TYPES)}), so the trees it configures cannot be found",
                    file=SOURCE,
                    key=key,
                    hint="keep each config in its server's "
                    "{server_type}/{implementation}/configs/ directory, as Gym lays them out",
                )
            )
            continue
        if root is None:
            root = found
        elif found != root:
            problems.append(
                Violation(
                    "GR-PKG-CONFIG-ROOT",
                    f"{entry} lies under {found}, the first config under "
                    f"{root}: one environment's trees live under one root",
                    file=SOURCE,
                    key=key,
                    hint="copy the trees under one directory",
                )
            )
            continue
        files.append(path)
    if problems or root is None:
        raise PackageInvalidError(
            f"config_paths of {SOURCE} cannot be read as Gym server trees",
            violations=problems,
            hint="fix each entry of config_paths",
        )
    rel = [p.relative_to(root).as_posix() for p in files]
    manifest = NativeManifest(format="native-v1", config_paths=list(dict.fromkeys(rel)), metadata=Metadata(name=name))
    server_dirs, _ = find_server_dirs(root)  # a tree with no install file is no server (module doc)
    return Package(root, manifest, tuple(dict.fromkeys(files)), (), server_dirs)
