"""A process standing for NeMo RL's ``NemoGym`` actor in a Ray worker: run as a script with one
JSON argument ``{"mode", "initial", "argv"}`` in the Gym checkout (the working directory). It first
makes ``sys.argv`` the worker's command line (``argv``: ``default_worker.py --node-ip-address=...``),
then calls the drop-in's ``RunHelper().start(...)`` as ``_spinup`` does, with ``initial`` as the
``initial_global_config_dict``. Its last stdout line is JSON.

``mode``:

* ``entries``: what NeMo RL main reads of Gym's in-process config after ``_spinup``
  (``NemoGym.list_entries``: every top-level entry with a server group among
  ``responses_api_agents``, ``responses_api_models``, ``resources_servers`` holding a server with
  an ``entrypoint``, ``{entry: [server_type, ...]}``), other reads of it (Gym's
  ``ServerClient.load_head_server_config``, the policy values), the head server's
  ``/server_instances``, and whether Gym's cache is still the same object after ``shutdown()``.
  Needs ``nemo_gym`` (a venv of tests/helpers/actor_venv.py).
* ``hold``: prints ``{"head", "pid"}`` once started and sleeps until killed.
* ``shutdown``: prints how long ``shutdown()`` took once started and the command lines of this
  process's descendants left after it (``{"shutdown_s", "left"}``).
* ``shutdown_at``: ``{"phase"}`` too: ``start()`` runs in another thread; once the start-up is in
  that phase (``building venvs``, ``waiting for servers to answer GET /``, ...) ``shutdown()`` is
  called, and the line says how long it took, whether ``start()`` had left by then, the code of
  what it raised and the descendants left.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

SERVER_GROUPS = ("responses_api_agents", "responses_api_models", "resources_servers")


def started_entries(resolved) -> dict[str, list[str]]:
    """NeMo RL main's ``list_entries`` computation over Gym's resolved config."""
    from omegaconf import DictConfig

    out: dict[str, list[str]] = {}
    for name, entry in resolved.items():
        if not isinstance(entry, (dict, DictConfig)):
            continue
        groups = [
            key
            for key in SERVER_GROUPS
            if isinstance(entry.get(key), (dict, DictConfig))
            and any(isinstance(s, (dict, DictConfig)) and "entrypoint" in s for s in entry.get(key).values())
        ]
        if groups:
            out[str(name)] = groups
    return out


def plain(value):
    """A config value as JSON takes it."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def left() -> list[list[str]]:
    """The command lines of this process's live descendants."""
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.cmdline())
        except psutil.Error:
            pass
    return out


def main() -> None:
    args = json.loads(sys.argv[1])
    sys.argv = list(args["argv"])  # the Ray worker's own command line, as inside the actor

    from omegaconf import DictConfig

    from gym_runtime.nemo_gym import GlobalConfigDictParserConfig, RunHelper

    rh = RunHelper()
    parser_config = GlobalConfigDictParserConfig(
        dotenv_path=os.path.join(os.getcwd(), "nemo_gym_env.yaml"),
        initial_global_config_dict=DictConfig(args["initial"]),
        skip_load_from_cli=True,
    )
    if args["mode"] == "shutdown_at":
        outcome: dict = {}

        def start() -> None:
            try:
                rh.start(parser_config)
                outcome["raised"] = None
            except BaseException as e:  # noqa: BLE001 - reported on stdout
                outcome["raised"] = getattr(e, "code", type(e).__name__)

        starter = threading.Thread(target=start)
        starter.start()
        while not (
            rh._runtime
            and rh._runtime.env
            and args["phase"] in (rh._runtime.env.phase, rh._runtime.env.supervisor.phase)
        ):
            assert starter.is_alive(), outcome
            time.sleep(0.02)
        t0 = time.monotonic()
        rh.shutdown()
        took = time.monotonic() - t0
        starter.join(60)
        print(
            json.dumps({"shutdown_s": took, "start_left": not starter.is_alive(), "left": left(), **outcome}),
            flush=True,
        )
        return

    rh.start(parser_config)
    if args["mode"] == "shutdown":
        t0 = time.monotonic()
        rh.shutdown()
        print(json.dumps({"shutdown_s": time.monotonic() - t0, "left": left()}), flush=True)
        return
    if args["mode"] == "hold":
        print(json.dumps({"head": rh.head_url, "pid": os.getpid()}), flush=True)
        while True:
            time.sleep(60)

    import httpx
    from nemo_gym import global_config
    from nemo_gym.server_utils import ServerClient

    resolved = global_config.get_global_config_dict()
    head = ServerClient.load_head_server_config()
    url = rh.head_url.replace("0.0.0.0", "127.0.0.1")
    instances = httpx.get(url + "/server_instances", trust_env=False).json()
    cached = global_config._GLOBAL_CONFIG_DICT
    rh.shutdown()
    print(
        json.dumps(
            {
                "entries": started_entries(resolved),
                "instances": [[i["process_name"], i["server_type"], i["name"], i["port"]] for i in instances],
                "ports": {
                    i["process_name"]: resolved[i["process_name"]][i["server_type"]][i["name"]].port for i in instances
                },
                "head_server": [head.host, head.port],
                "head_url": rh.head_url,
                "policy": [resolved.policy_model_name, resolved.policy_api_key, plain(resolved.policy_base_url)],
                "policy_model_base_url": plain(resolved.policy_model.responses_api_models.vllm_model.base_url),
                "port_range": [resolved.port_range_low, resolved.port_range_high],
                "ray_head_node_address": resolved.get("ray_head_node_address"),
                "kept_after_shutdown": global_config._GLOBAL_CONFIG_DICT is cached,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
