"""Load an environment package into a :class:`Package` value object, checking every rule.

``check_package`` collects all violations (manifest schema, layout, wheelhouse, optional wheel
tags for a target) and never raises for bad input; ``load_package`` raises one
:class:`~gym_runtime.errors.PackageInvalidError` carrying all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gym_runtime.errors import PackageInvalidError, Violation
from gym_runtime.package.layout import ServerDir, check_config_paths, find_jsonl, find_server_dirs
from gym_runtime.package.manifest import AdapterManifest, Manifest, parse_manifest
from gym_runtime.package.wheels import Target, WheelFile, incompatible_wheels, read_wheelhouse

WHEELS_FORMATS = ("wheels-v1", "adapter-wheels-v1")


@dataclass(frozen=True)
class Package:
    """A validated environment package (docs/architecture.md §3).

    ``config_files`` are absolute paths in manifest order; ``wheels`` the vendored closure
    (empty for native-v1); ``server_dirs`` the package's own server trees keyed by
    ``(server_type, implementation)``.
    """

    root: Path
    manifest: Manifest
    config_files: tuple[Path, ...]
    wheels: tuple[WheelFile, ...] = ()
    server_dirs: dict[tuple[str, str], ServerDir] = field(default_factory=dict)

    @property
    def format(self) -> str:
        return self.manifest.format

    @property
    def name(self) -> str:
        return self.manifest.metadata.name

    @property
    def wheels_dir(self) -> Path | None:
        return self.root / "wheels" if self.format in WHEELS_FORMATS else None

    @property
    def adapter_agent(self) -> str | None:
        return self.manifest.adapter.agent if isinstance(self.manifest, AdapterManifest) else None

    def rel(self, p: Path) -> str:
        """``p`` relative to the package root when inside it, else as given (for messages)."""
        try:
            return p.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return str(p)


def check_package(path: str | Path, target: Target | None = None) -> tuple[Package | None, list[Violation]]:
    """Check every package rule; return ``(package, [])`` or ``(None or partial, violations)``.

    ``target`` additionally checks every vendored wheel's tags against that platform/Python.
    """
    root = Path(path)
    try:
        exists, is_dir = root.exists(), root.is_dir()
    except (OSError, ValueError) as e:
        return None, [
            Violation(
                "GR-PKG-NOT-FOUND", f"package path cannot be read: {str(path)!r}: {getattr(e, 'strerror', None) or e}"
            )
        ]
    if not exists:
        shown = str(root) if str(root).isprintable() else ascii(str(root))
        return None, [
            Violation(
                "GR-PKG-NOT-FOUND",
                f"package path does not exist: {shown}",
                hint="pass the directory that holds nemo-environment.yaml",
            )
        ]
    if not is_dir:
        return None, [
            Violation(
                "GR-PKG-NOT-A-DIR",
                f"package path is a file, not a directory: {root}",
                hint="pass the directory that holds nemo-environment.yaml, not the file itself",
            )
        ]
    root = root.resolve()
    manifest, violations = parse_manifest(root)
    violations += find_jsonl(root)
    server_dirs, sv = find_server_dirs(root)
    violations += sv
    if manifest is None:
        return None, violations
    files, cv = check_config_paths(root, manifest.config_paths)
    violations += cv
    wheels: list[WheelFile] = []
    if manifest.format in WHEELS_FORMATS:
        wheels, wv = read_wheelhouse(root / "wheels", root)
        violations += wv
        if target is not None:
            violations += incompatible_wheels(wheels, target, root)
    pkg = Package(root, manifest, tuple(files), tuple(wheels), server_dirs)
    return pkg, violations


def load_package(path: str | Path, target: Target | None = None) -> Package:
    """Load and validate a package; raises :class:`PackageInvalidError` listing every violation."""
    pkg, violations = check_package(path, target)
    if violations or pkg is None:
        raise PackageInvalidError(
            f"environment package {path} is invalid",
            violations=violations,
            hint="fix each problem, then run `gym-runtime validate` again",
        )
    return pkg
