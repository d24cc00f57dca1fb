"""Runtime settings: the ONE module that reads environment variables.

Everything else receives a :class:`RuntimeSettings` value (httpx style: configuration is passed
down, never read from globals). Operator egress settings (``NMP_RL_SANDBOX_*``) are read by
``sandbox.policy.EgressPolicy.from_environ`` from the mapping this module hands it.

Variables (all optional):

==================================  =========================================================
``GYM_RUNTIME_HOME``                state root (default ``~/.cache/gym-runtime``): venvs, logs
``GYM_RUNTIME_VENV_DIR``            venv root (default ``$GYM_RUNTIME_HOME/venvs``)
``GYM_RUNTIME_UV_CACHE_DIR``        uv cache (default: uv's own default cache)
``GYM_RUNTIME_PIN_MODE``            ``gym`` | ``auto`` (default) | ``none`` (DESIGN.md §5)
``GYM_RUNTIME_PIN_NEMO_GYM``        image pin for ``nemo-gym`` (default 0.4.0)
``GYM_RUNTIME_PIN_RAY``             image pin for ``ray[default]`` (default: this runtime's ray, else 2.60.0)
``GYM_RUNTIME_PIN_OPENAI``          image pin for ``openai`` (default: this runtime's openai)
``GYM_RUNTIME_PYTHON``              default interpreter for server venvs (version or path;
                                    default: the runtime's own ``X.Y``)
``GYM_RUNTIME_POLICY_BASE_URL``     the job's policy endpoint(s), comma-separated for replicas
``GYM_RUNTIME_POLICY_API_KEY``      the policy endpoint's API key
``GYM_RUNTIME_POLICY_MODEL_NAME``   the served model name
==================================  =========================================================
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path

from gym_runtime.config.merge import PolicyValues
from gym_runtime.errors import SettingsError

PIN_MODES = ("gym", "auto", "none")


def builtin_servers_dir() -> Path:
    """The built-in Gym server trees shipped with the runtime (``servers/`` beside ``gym_runtime/``)."""
    return Path(__file__).resolve().parent.parent / "servers"


def _installed(dist: str, default: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return default


@dataclass(frozen=True)
class RuntimeSettings:
    """Settings for one run. ``pins`` maps requirement names (``nemo-gym``, ``ray[default]``,
    ``openai``) to exact versions; ``environ`` is the environment snapshot the run started with
    (handed to the sandbox policy and scrubbed before any uv call)."""

    home: Path
    venv_dir: Path
    uv_cache_dir: Path | None
    pin_mode: str
    pins: dict[str, str]
    python: str
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    def with_overrides(self, **kw: object) -> RuntimeSettings:
        """A copy with some fields replaced (CLI flags win over the environment)."""
        return replace(self, **kw)  # type: ignore[arg-type]


def load_settings(environ: Mapping[str, str] | None = None) -> RuntimeSettings:
    """Read settings from ``environ`` (default ``os.environ``); raises :class:`SettingsError`."""
    env = dict(os.environ if environ is None else environ)
    home = Path(env.get("GYM_RUNTIME_HOME") or Path.home() / ".cache" / "gym-runtime").expanduser()
    mode = env.get("GYM_RUNTIME_PIN_MODE", "auto")
    if mode not in PIN_MODES:
        raise SettingsError(f"GYM_RUNTIME_PIN_MODE={mode!r} is not one of {', '.join(PIN_MODES)}",
                            hint="unset it for the default (auto)")
    pins = {
        "nemo-gym": env.get("GYM_RUNTIME_PIN_NEMO_GYM", "0.4.0"),
        "ray[default]": env.get("GYM_RUNTIME_PIN_RAY") or _installed("ray", "2.60.0"),
        "openai": env.get("GYM_RUNTIME_PIN_OPENAI") or _installed("openai", "2.7.2"),
    }
    cache = env.get("GYM_RUNTIME_UV_CACHE_DIR")
    return RuntimeSettings(
        home=home,
        venv_dir=Path(env.get("GYM_RUNTIME_VENV_DIR") or home / "venvs").expanduser(),
        uv_cache_dir=Path(cache).expanduser() if cache else None,
        pin_mode=mode,
        pins=pins,
        python=env.get("GYM_RUNTIME_PYTHON") or f"{sys.version_info[0]}.{sys.version_info[1]}",
        environ=env,
    )


def policy_from_environ(environ: Mapping[str, str] | None = None) -> PolicyValues:
    """The job's policy values from ``GYM_RUNTIME_POLICY_*`` (``None`` where unset)."""
    env = os.environ if environ is None else environ
    url = env.get("GYM_RUNTIME_POLICY_BASE_URL") or None
    urls: str | list[str] | None = url
    if url and "," in url:
        urls = [u.strip() for u in url.split(",") if u.strip()]
    return PolicyValues(urls, env.get("GYM_RUNTIME_POLICY_API_KEY") or None,
                        env.get("GYM_RUNTIME_POLICY_MODEL_NAME") or None, origin="environment")
