"""NeMo Gym's in-process global config, as Gym's own ``RunHelper.start`` leaves it.

Contract (NeMo Gym 0.7.0 ``nemo_gym/global_config.py``): ``get_global_config_dict()`` returns the
module-level ``_GLOBAL_CONFIG_DICT`` once it is set (``maybe_get_global_config_dict``); otherwise
it reads ``NEMO_GYM_CONFIG_DICT`` from the environment, else it *parses the process's command
line* as Hydra overrides. Gym's ``RunHelper.start`` (``nemo_gym/cli/env.py``) sets that cache to
the resolved global config first thing (every server instance with its ``host``/``port``, the
policy values, ``head_server``, ``ray_head_node_address``; secrets unmasked), and ``shutdown``
leaves it set. NeMo RL's ``NemoGym`` actor reads it in process after ``_spinup`` (``list_entries``,
``agent_implementations``); in a Ray worker, a parse of the command line ends in ``SystemExit: 2``
(``--node-ip-address=...`` is no Hydra override).

:func:`fill` sets ``_GLOBAL_CONFIG_DICT`` the same way, from the config the runtime started the
servers with as seen from this host (:func:`gym_runtime.supervise.contract.config_view`), read back
through YAML as a Gym server reads ``NEMO_GYM_CONFIG_DICT`` (:func:`~gym_runtime.supervise.contract.to_yaml`).
Only that cache is filled: no environment variable (it would reach every process the caller starts
and make Gym's clients skip the head server), no Ray, no telemetry.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

from gym_runtime.supervise import contract

MODULE = "nemo_gym.global_config"
CACHE = "_GLOBAL_CONFIG_DICT"


def fill(view: dict[str, Any], given_ray_address: str | None = None) -> bool:
    """Set Gym's cache to ``view`` (the host's view of the resolved config, secrets unmasked) when
    ``nemo_gym`` is importable in this process; ``given_ray_address`` (the job's
    ``ray_head_node_address``) is kept where the view has none, as Gym keeps the one it was given.
    True when filled; False when there is no ``nemo_gym``, or its ``global_config`` cannot be
    imported or has no such cache (a line on stderr says so; the environment keeps running)."""
    if importlib.util.find_spec("nemo_gym") is None:
        return False
    try:
        module = importlib.import_module(MODULE)
        from omegaconf import OmegaConf
    except Exception as e:  # noqa: BLE001 - a broken Gym install must not stop a started environment
        print(
            f"gym-runtime: {MODULE} cannot be imported ({type(e).__name__}: {e}); its config is not set",
            file=sys.stderr,
        )
        return False
    if not hasattr(module, CACHE):
        print(f"gym-runtime: this {MODULE} has no {CACHE}; its config is not set", file=sys.stderr)
        return False
    data = dict(view)
    if given_ray_address and not data.get("ray_head_node_address"):
        data["ray_head_node_address"] = given_ray_address
    setattr(module, CACHE, OmegaConf.create(contract.to_yaml(data)))
    return True
