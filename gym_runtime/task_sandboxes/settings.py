"""The operator's task-sandbox settings, parsed from the environment mapping ``gym_runtime.settings`` hands over.

==================================  =========================================================
``GYM_RUNTIME_SANDBOX_PROVIDER``    ``auto`` (default): a config's sandbox provider this host cannot
                                    give is replaced by ``gym_runtime``, saying so; ``gym_runtime``:
                                    every provider block is; ``config``: configs are left as they are
``GYM_RUNTIME_SANDBOX_IMAGES``      images directories, ``:``-separated (default ``$GYM_RUNTIME_HOME/images``)
``GYM_RUNTIME_SANDBOX_IMAGE_MAP``   ``REF=PATH`` / ``REF=host`` comma list (``*`` for any image)
``GYM_RUNTIME_SANDBOX_MEMORY_MB``   memory of a box whose spec names none, and the most any spec gets
                                    (default 4096; ``0``: no limit)
``GYM_RUNTIME_SANDBOX_PIDS``        processes + threads per box (default 1024; ``0``: no limit)
``GYM_RUNTIME_SANDBOX_MAX``         live boxes per server instance (default 256)
==================================  =========================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gym_runtime.errors import SettingsError

PROVIDER_MODES = ("auto", "gym_runtime", "config")


@dataclass(frozen=True)
class TaskSandboxSettings:
    """Parsed task-sandbox settings (module doc); ``unpack_dir``: where image layouts are unpacked."""

    provider_mode: str = "auto"
    image_dirs: tuple[Path, ...] = ()
    image_map: Mapping[str, str] = field(default_factory=dict)
    memory_mb: int | None = 4096
    pids: int | None = 1024
    max_per_server: int = 256
    unpack_dir: Path = Path("images-unpacked")


def _number(env: Mapping[str, str], var: str, default: int | None, zero_is_none: bool = True) -> int | None:
    raw = env.get(var)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0 or (value == 0 and not zero_is_none):
        raise SettingsError(
            f"{var}={raw!r} is not a whole number {'>= 0' if zero_is_none else '> 0'}",
            code="GR-SETTINGS-SANDBOX",
            hint=f"unset {var} for the default",
        )
    return value or None


def load(env: Mapping[str, str], home: Path) -> TaskSandboxSettings:
    """Read the variables; raises :class:`SettingsError` (``GR-SETTINGS-SANDBOX``) naming the bad one."""
    mode = env.get("GYM_RUNTIME_SANDBOX_PROVIDER") or "auto"
    if mode not in PROVIDER_MODES:
        raise SettingsError(
            f"GYM_RUNTIME_SANDBOX_PROVIDER={mode!r} is not one of {', '.join(PROVIDER_MODES)}",
            code="GR-SETTINGS-SANDBOX",
            hint="unset it for the default (auto)",
        )
    raw_dirs = env.get("GYM_RUNTIME_SANDBOX_IMAGES")
    dirs = tuple(Path(d).expanduser() for d in raw_dirs.split(":") if d) if raw_dirs else (home / "images",)
    try:
        mapping: dict[str, str] = {}
        if env.get("GYM_RUNTIME_SANDBOX_IMAGE_MAP"):  # sandbox/ loads only when there is a map to read
            from sandbox.images import parse_image_map

            mapping = parse_image_map(env["GYM_RUNTIME_SANDBOX_IMAGE_MAP"])
    except ValueError as e:
        raise SettingsError(
            f"GYM_RUNTIME_SANDBOX_IMAGE_MAP: {e}",
            code="GR-SETTINGS-SANDBOX",
            hint="use a comma list of REF=/absolute/path or REF=host (REF may be *)",
        ) from None
    return TaskSandboxSettings(
        mode,
        dirs,
        mapping,
        _number(env, "GYM_RUNTIME_SANDBOX_MEMORY_MB", 4096),
        _number(env, "GYM_RUNTIME_SANDBOX_PIDS", 1024),
        _number(env, "GYM_RUNTIME_SANDBOX_MAX", 256, zero_is_none=False) or 256,
        home / "images-unpacked",
    )
