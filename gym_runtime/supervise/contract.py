"""Gym's server-process contract (docs/architecture.md §7; NeMo Gym 0.4.0 `nemo_gym/cli/env.py` `RunHelper.start` and `nemo_gym/server_utils.py` `SimpleServer.run_webserver`).

* cwd = the server directory; argv = ``<venv>/bin/python <entrypoint>`` (no shell, no secrets);
* env ``NEMO_GYM_CONFIG_DICT`` = the server's own view of the merged YAML (:func:`server_config_yaml`:
  ``host``/``port`` set for every instance, ``head_server: {host, port}``, ``ray_head_node_address``
  when Ray is used, the defaults a Gym parse would add that children read (``dry_run: false``, port
  range, disallowed ports), and only the secrets its own config references), every string escaped
  so a second resolution by the server changes nothing (:func:`to_yaml`); no key of the runtime's
  own inside any instance block (:data:`~gym_runtime.config.instances.RUNTIME_INSTANCE_KEYS`:
  ``placement``, ``reward_range``, ``python_version``), since a Gym 0.7 server's config model
  refuses unknown keys (``extra="forbid"``) and the server would not start;
  ``NEMO_GYM_CONFIG_PATH`` = the instance name; ``PYTHONPATH`` = the server directory;
* the rest of the environment is an explicit allowlist (never the daemon's ``RAY_ADDRESS``,
  ``UV_*`` or credentials), plus the variables the operator passes (``GYM_RUNTIME_SERVER_ENV``,
  :mod:`gym_runtime.supervise.passthrough`), which are private; the CA files and directories it names (:func:`trust_paths`) are shown
  read-only in the server's sandbox, wherever they are. The config is the one *private* variable
  (:func:`private_env`): the sandbox hands it to the server process alone, never to bubblewrap
  (docs/architecture.md §6).

Two views of one config: ``inside`` (addresses servers use inside the sandbox network, narrowed per
server by :func:`server_config_yaml` and sent to servers) and ``outside`` (addresses reachable from
the host, every secret masked, served by the head server). Both are pure functions of the merged
config, so a server started on another node gets the same view.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from gym_runtime.config.escape import escape_interpolations
from gym_runtime.config.instances import RUNTIME_INSTANCE_KEYS
from gym_runtime.config.secrets import SecretMap
from gym_runtime.package.layout import SERVER_TYPES

CONFIG_VAR = "NEMO_GYM_CONFIG_DICT"
# Variables copied from the daemon's environment into a server's (when set).
ENV_ALLOW = (
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "USER",  # a uid with no passwd entry gets it from the daemon (gym_runtime/inherited.py): getpass.getuser()
    "LOGNAME",
    "TERM",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
)

TRUST_VARS = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")


def trust_paths(env: Mapping[str, str]) -> list[Path]:
    """The existing files and directories a server's ``env`` names as CAs to trust
    (:data:`TRUST_VARS`; ``SSL_CERT_DIR`` may list several, ``:``-separated, as OpenSSL reads it).
    The sandbox must show them: clients such as httpx load ``SSL_CERT_FILE`` when they are created
    and fail on a path outside the server's view (e.g. a bundle mounted into a container)."""
    found: list[Path] = []
    for var in TRUST_VARS:
        value = env.get(var, "")
        for item in value.split(":") if var == "SSL_CERT_DIR" else [value]:
            path = Path(item)
            if item and path.is_absolute() and path.exists() and path not in found:
                found.append(path)
    return found


def config_view(
    data: dict[str, Any], addresses: Mapping[str, tuple[str, int]], head: tuple[str, int], ray_address: str | None
) -> dict[str, Any]:
    """A copy of the resolved config with each instance's ``host``/``port`` from ``addresses``
    (instance name -> (host, port)), ``head_server`` and, if given, ``ray_head_node_address``;
    the runtime's own keys (:data:`RUNTIME_INSTANCE_KEYS`) are left out of every instance block."""
    out = copy.deepcopy(data)
    for name, value in out.items():
        inner = (
            _inner(out, name)
            if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in SERVER_TYPES
            else None
        )
        if inner is not None:
            for key in RUNTIME_INSTANCE_KEYS:
                inner.pop(key, None)
    for name, (host, port) in addresses.items():
        inner = _inner(out, name)
        if inner is not None:
            inner["host"], inner["port"] = host, port
    out["head_server"] = {"host": head[0], "port": head[1]}
    if ray_address:
        out["ray_head_node_address"] = ray_address
    else:
        out.pop("ray_head_node_address", None)
    out.setdefault("dry_run", False)
    out.setdefault("port_range_low", 10001)
    out.setdefault("port_range_high", 20000)
    out["disallowed_ports"] = sorted({head[1], *(p for _, p in addresses.values())})
    return out


def _inner(data: dict[str, Any], name: str) -> dict[str, Any] | None:
    value = data.get(name)
    if not isinstance(value, dict) or not value:
        return None
    impls = next(iter(value.values()))
    if not isinstance(impls, dict) or not impls:
        return None
    inner = next(iter(impls.values()))
    return inner if isinstance(inner, dict) else None


def to_yaml(view: dict[str, Any]) -> str:
    """The YAML text Gym children parse with ``OmegaConf.create`` and resolve (again): every string
    is escaped (:mod:`gym_runtime.config.escape`), so each resolution yields the resolved value the
    daemon computed, a literal ``${...}`` the author escaped included (case C29)."""
    return yaml.safe_dump(escape_interpolations(view), sort_keys=False)


def server_config_yaml(
    inside: dict[str, Any],
    secrets: SecretMap,
    instance: str,
    patch: Callable[[dict[str, Any], str], None] | None = None,
) -> str:
    """``NEMO_GYM_CONFIG_DICT`` for ``instance``: the inside view (:func:`config_view`) with every
    secret its own config does not reference masked (:meth:`SecretMap.view`), as YAML. ``patch``
    changes that view for that instance alone (the OpenSandbox gate's address and the instance's
    own token, :func:`gym_runtime.task_sandboxes.bringup.gate_patch`)."""
    view = secrets.view(inside, instance)
    if patch is not None:
        patch(view, instance)
    return to_yaml(view)


def private_env(config_yaml: str, passed: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables only the server process itself may hold (``ProcessSpec.private_env``): its
    config, and the operator's variables passed to it (``passed``,
    :func:`gym_runtime.supervise.passthrough.values_for`)."""
    return {**(passed or {}), CONFIG_VAR: config_yaml}


def server_env(
    instance: str, server_dir: Path, venv_python: Path, work_dir: Path, environ: Mapping[str, str]
) -> dict[str, str]:
    """The environment of one server process, without its config (:func:`private_env`)."""
    venv_bin = venv_python.parent
    env = {k: environ[k] for k in ENV_ALLOW if k in environ}
    env.update(
        {
            "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
            "VIRTUAL_ENV": str(venv_bin.parent),
            "HOME": str(work_dir),
            "TMPDIR": "/tmp",
            "PYTHONPATH": str(server_dir),
            "PYTHONUNBUFFERED": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HOME": str(work_dir / "huggingface"),
            # Gym's SDK sets it, when unset, under the server's cwd: the server directory, read-only here
            "HF_DATASETS_CACHE": str(work_dir / "huggingface" / "datasets"),
            "RAY_USAGE_STATS_ENABLED": "0",
            "NEMO_GYM_CONFIG_PATH": instance,
        }
    )
    env.setdefault("LANG", "C.UTF-8")
    return env
