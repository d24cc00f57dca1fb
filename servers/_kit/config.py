"""Reading a server's own config the way Gym's servers do (docs/architecture.md §7; NeMo Gym 0.4.0 `nemo_gym/config_types.py` and `nemo_gym/server_utils.py`).

The daemon starts ``python app.py`` with ``NEMO_GYM_CONFIG_DICT`` = the merged YAML of every
instance (``<name>: {<server_type>: {<impl>: {host, port, ...}}}`` plus ``head_server``) and
``NEMO_GYM_CONFIG_PATH`` = this instance's name. ``${...}`` interpolations are resolved with
OmegaConf. Instance names are looked up by indexing, never by dotted path, so a name holding a
dot still resolves (cases/C22).
"""

from __future__ import annotations

import os
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel

CONFIG_DICT_VAR = "NEMO_GYM_CONFIG_DICT"
CONFIG_NAME_VAR = "NEMO_GYM_CONFIG_PATH"
SERVER_TYPES = ("responses_api_models", "resources_servers", "responses_api_agents", "environment_servers")


class StartupError(Exception):
    """A server cannot start: bad or missing config. The message names the instance and key."""


def load_global_config() -> DictConfig:
    """The merged config from ``NEMO_GYM_CONFIG_DICT``; raises :class:`StartupError` if absent or not YAML."""
    raw = os.environ.get(CONFIG_DICT_VAR)
    if not raw:
        raise StartupError(f"{CONFIG_DICT_VAR} is not set: this server must be started by gym-runtime or NeMo Gym")
    try:
        config = OmegaConf.create(raw)
    except (OmegaConfBaseException, ValueError) as exc:
        raise StartupError(f"{CONFIG_DICT_VAR} is not a YAML mapping: {exc}") from exc
    if not isinstance(config, DictConfig):
        raise StartupError(f"{CONFIG_DICT_VAR} is not a YAML mapping")
    return config


def instance_name() -> str:
    """This process's instance name (``NEMO_GYM_CONFIG_PATH``)."""
    name = os.environ.get(CONFIG_NAME_VAR)
    if not name:
        raise StartupError(f"{CONFIG_NAME_VAR} (this server's instance name) is not set")
    return name


def find_instance(global_config: DictConfig, name: str) -> tuple[str, str, DictConfig]:
    """``(server_type, implementation, inner config node)`` of instance ``name``.

    Raises :class:`StartupError` when the instance is missing or not Gym-shaped.
    """
    if name not in global_config:
        raise StartupError(f"server instance '{name}' is not defined in the merged config")
    node = global_config[name]
    types = [t for t in SERVER_TYPES if isinstance(node, DictConfig) and t in node]
    if len(types) != 1:
        raise StartupError(f"'{name}' must hold exactly one of {', '.join(SERVER_TYPES)}")
    impls = node[types[0]]
    if not isinstance(impls, DictConfig) or len(impls) != 1:
        raise StartupError(f"'{name}.{types[0]}' must hold exactly one implementation")
    impl = next(iter(impls.keys()))
    return types[0], str(impl), impls[impl]


def resolved(global_config: DictConfig, name: str) -> dict[str, Any]:
    """The inner config of instance ``name`` with ``${...}`` resolved, plus ``name``."""
    server_type, impl, node = find_instance(global_config, name)
    try:
        inner = OmegaConf.to_container(node, resolve=True)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or ""
        raise StartupError(
            f"cannot resolve the config of '{name}' ({server_type}/{impl}): {key} {exc.msg if hasattr(exc, 'msg') else exc}"
        ) from exc
    return {**inner, "name": name}


def peer_address(global_config: DictConfig, name: str, server_type: str | None = None) -> str:
    """``http://host:port`` of instance ``name`` (a wildcard bind host is reached via 127.0.0.1).

    Raises :class:`StartupError` if the instance is unknown, of another type, or has no port.
    """
    kind, impl, _ = find_instance(global_config, name)
    if server_type and kind != server_type:
        raise StartupError(f"'{name}' is a {kind} instance, not {server_type}")
    inner = resolved(global_config, name)
    host, port = inner.get("host") or "127.0.0.1", inner.get("port")
    if port is None:
        raise StartupError(f"'{name}' ({kind}/{impl}) has no port assigned")
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in str(host) and not str(host).startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


class Ref(BaseModel):
    """A server reference ``{type, name}`` (Gym's ``ModelServerRef`` / ``ResourcesServerRef``)."""

    type: str
    name: str
