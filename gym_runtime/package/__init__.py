"""Environment packages: the manifest, layout rules, wheelhouse (docs/architecture.md §3)."""

from gym_runtime.package.layout import SERVER_TYPES, ServerDir
from gym_runtime.package.loader import Package, check_package, load_package
from gym_runtime.package.manifest import MANIFEST_NAME
from gym_runtime.package.wheels import Target, WheelFile, parse_target

__all__ = [
    "MANIFEST_NAME",
    "SERVER_TYPES",
    "Package",
    "ServerDir",
    "Target",
    "WheelFile",
    "check_package",
    "load_package",
    "parse_target",
]
