"""NeMo Gym's parser input, read into what :class:`gym_runtime.Runtime` takes.

Contract (NeMo Gym 0.7.0 ``nemo_gym/global_config.py``: ``GlobalConfigDictParserConfig`` and
``GlobalConfigDictParser.parse``): the global config is the ``config_paths`` files, then the dotenv
YAML (``dotenv_path``, default ``env.yaml`` in the working directory; skipped with
``skip_load_from_dotenv``), then ``initial_global_config_dict``, then the command line's
``key=value`` items (unless ``skip_load_from_cli``), later wins. :func:`read_job` keeps that order:
the initial dict merged over the dotenv file becomes one config layer over the files
(``job_config``), the command line becomes overrides, and the keys the runtime acts on itself are
taken out of them:

==============================  ==========================================================
``config_paths``                the package (:func:`~gym_runtime.package.bare.package_from_config_paths`)
``policy_base_url`` (str|list)  the policy endpoint(s): one replica per URL
``policy_api_key``, ``policy_model_name``   the policy values
``head_server: {host, port}``   where the head server listens (default 127.0.0.1, a free port)
``nemo_gym_log_dir``            the run's directory (its ``logs/`` holds one log per server)
``server_spinup_timeout_seconds``  the start-up deadline (0: none; default 600 s)
==============================  ==========================================================

Every other key (``ray_head_node_address``: the Ray cluster servers join, never a second one
started; ``default_host``, ``port_range_low/high``, ``global_aiohttp_connector_limit``
and ``_per_host``, ...) stays in the global config the servers read, as under Gym's launcher.

Errors: :class:`~gym_runtime.errors.ConfigError` ``GR-NEMOGYM-CONFIG`` for a parser input Gym
itself would refuse (no ``config_paths``, a ``head_server`` that is no mapping, a dotenv file
that is no mapping), :class:`~gym_runtime.errors.PackageInvalidError` from the package stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf
from pydantic import BaseModel, ConfigDict

from gym_runtime.errors import ConfigError, Violation
from gym_runtime.package import Package
from gym_runtime.package.bare import package_from_config_paths
from gym_runtime.package.yamlfile import load_yaml_file

NO_DEADLINE_S = 365 * 24 * 3600.0  # `server_spinup_timeout_seconds: 0` means no limit, as under Gym


class GlobalConfigDictParserConfig(BaseModel):
    """NeMo Gym 0.7.0's parser input, field for field (``nemo_gym/global_config.py``).
    ``initial_global_config_dict`` may be a ``DictConfig`` (as NeMo RL passes it) or a plain dict.
    ``hide_secrets`` and ``offline`` change what Gym prints and inspects, never how servers start:
    they are accepted and have no effect here."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    dotenv_path: Path | None = None
    initial_global_config_dict: DictConfig | dict | None = None
    skip_load_from_cli: bool = False
    skip_load_from_dotenv: bool = False
    hide_secrets: bool = False
    offline: bool = False


@dataclass
class Job:
    """What the runtime is asked for (module doc): ``package``, ``job_config`` (``(mapping, label)``,
    the layer over the files), ``overrides`` (the command line), the policy values, the head
    address, the run directory and the start-up deadline (seconds)."""

    package: Package
    job_config: tuple[dict[str, Any], str] | None = None
    overrides: list[str] = field(default_factory=list)
    policy_base_url: str | list[str] | None = None
    policy_api_key: str | None = None
    policy_model_name: str | None = None
    head_host: str = "127.0.0.1"
    head_port: int | None = None
    work_dir: Path | None = None
    startup_timeout_s: float | None = None


def _plain(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, DictConfig):
        return OmegaConf.to_container(value, resolve=False)  # type: ignore[return-value]  # to_container of a DictConfig is a dict
    return dict(value)


def _refuse(message: str, key: str, hint: str) -> ConfigError:
    return ConfigError(
        message,
        code="GR-NEMOGYM-CONFIG",
        hint=hint,
        violations=[Violation("GR-NEMOGYM-CONFIG", message, file="the global config", key=key)],
    )


def _dotenv(cfg: GlobalConfigDictParserConfig, cwd: Path) -> tuple[dict[str, Any], str] | None:
    path = cfg.dotenv_path if cfg.dotenv_path is not None else cwd / "env.yaml"
    if cfg.skip_load_from_dotenv or not Path(path).is_file():
        return None
    data = load_yaml_file(Path(path)) or {}
    if not isinstance(data, dict):
        raise _refuse(
            f"dotenv file {path} holds a {type(data).__name__}, not a mapping",
            "dotenv_path",
            "write it as YAML keys, e.g. policy_api_key: ...",
        )
    return data, str(path)


def _cli(argv: list[str]) -> list[str]:
    """The ``key=value`` items of a Gym command line (``+key=`` and ``++key=`` as Hydra writes them)."""
    return [a for a in argv if "=" in a and not a.startswith("-")]


def read_job(cfg: GlobalConfigDictParserConfig, cwd: Path, argv: list[str]) -> Job:
    """The :class:`Job` of ``cfg`` (module doc); ``cwd`` is where relative paths are read, ``argv``
    the process's command line (``sys.argv[1:]``). Raises ``GR-NEMOGYM-CONFIG`` or the package's errors."""
    initial = _plain(cfg.initial_global_config_dict)
    dotenv = _dotenv(cfg, cwd)
    layers = ([dotenv] if dotenv else []) + [(initial, "initial_global_config_dict")]
    overrides = [] if cfg.skip_load_from_cli else _cli(argv)

    def take(key: str) -> Any:
        """The winning value of a key the runtime acts on itself, taken out of every layer."""
        found = None
        for data, _ in layers:
            if key in data:
                found = data.pop(key)
        return found

    paths = take("config_paths")
    if paths is None:
        raise _refuse(
            "the global config has no config_paths",
            "config_paths",
            "set initial_global_config_dict['config_paths'] to the Gym YAML files to start",
        )
    head = take("head_server") or {}
    if not isinstance(head, dict):
        raise _refuse(
            f"head_server must be a mapping {{host, port}}, got {head!r}",
            "head_server",
            "set head_server: {host: 0.0.0.0, port: <free port>}",
        )
    log_dir = take("nemo_gym_log_dir")
    deadline = "server_spinup_timeout_seconds"  # stays in the config too: Gym's servers may read it
    timeout = next((data[deadline] for data, _ in reversed(layers) if deadline in data), None)
    policy = take("policy_base_url"), take("policy_api_key"), take("policy_model_name")
    merged = OmegaConf.merge(*(OmegaConf.create(data) for data, _ in layers))
    container = OmegaConf.to_container(merged, resolve=False)
    assert isinstance(container, dict)  # a merge of mappings
    layer = (
        cast(dict[str, Any], container),
        " over ".join(name for _, name in reversed(layers)),
    )  # "initial_global_config_dict over .../env.yaml"
    job = Job(package_from_config_paths(paths, cwd), layer, overrides, *policy)
    if isinstance(job.policy_base_url, (list, tuple)) and len(job.policy_base_url) == 1:
        job.policy_base_url = str(job.policy_base_url[0])
    elif job.policy_base_url is not None and not isinstance(job.policy_base_url, str):
        job.policy_base_url = [str(u) for u in job.policy_base_url]
    job.head_host = str(head.get("host") or "127.0.0.1")
    job.head_port = int(head["port"]) if head.get("port") else None
    job.work_dir = Path(log_dir) if log_dir else None
    if timeout is not None:
        job.startup_timeout_s = float(timeout) if float(timeout) > 0 else NO_DEADLINE_S
    return job
