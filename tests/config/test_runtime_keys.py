"""No key of the runtime's own inside a server's block (docs/architecture.md §7.1): what a server
(``NEMO_GYM_CONFIG_DICT``) and a Gym client (``/global_config_dict_yaml``) read leaves out
``placement``, ``reward_range`` and a server's own ``python_version``, since NeMo Gym 0.7.0's server
configs (``nemo_gym/base_environment_server.py``: ``extra="forbid"``) refuse unknown keys and the
server would not start; the runtime still reads them from the merged config."""

from __future__ import annotations

import yaml

from gym_runtime.supervise import contract


def test_runtime_keys_stay_out_of_every_view_a_server_reads(pkg_with, build) -> None:
    cfg = {
        "policy_model": {
            "responses_api_models": {
                "m": {"entrypoint": "app.py", "python_version": "3.13", "placement": {"num_cpus": 1}}
            }
        },
        "res": {
            "resources_servers": {
                "r": {"entrypoint": "app.py", "domain": "math", "reward_range": [0, 1], "extra_of_its_own": 5}
            }
        },
        "relay": {
            "environment_servers": {
                "e": {"entrypoint": "app.py", "agent_server": {"name": "agent"}, "placement": {"replicas": 1}}
            }
        },
        "agent": {
            "responses_api_agents": {
                "a": {
                    "entrypoint": "app.py",
                    "resources_server": {"type": "resources_servers", "name": "res"},
                    "model_server": {"type": "responses_api_models", "name": "policy_model"},
                }
            }
        },
        "python_version": "3.13",
        "notes": {"placement": "a top-level block keeps its keys"},
    }
    servers = [
        ("responses_api_models", "m"),
        ("resources_servers", "r"),
        ("environment_servers", "e"),
        ("responses_api_agents", "a"),
    ]
    m = build(pkg_with({"configs/a.yaml": cfg}, servers))
    assert m.instances["res"].config["reward_range"] == [0, 1]  # the runtime reads them
    addresses = {n: ("127.0.0.1", 10100 + i) for i, n in enumerate(m.instances)}
    view = contract.config_view(m.data, addresses, ("127.0.0.1", 10099), None)
    sent = yaml.safe_load(contract.server_config_yaml(view, m.secrets, "relay"))
    assert sent["relay"]["environment_servers"]["e"] == {
        "entrypoint": "app.py",
        "agent_server": {"name": "agent"},
        "host": "127.0.0.1",
        "port": 10102,
    }
    assert sent["policy_model"]["responses_api_models"]["m"] == {
        "entrypoint": "app.py",
        "host": "127.0.0.1",
        "port": 10100,
    }
    assert sent["res"]["resources_servers"]["r"] == {
        "entrypoint": "app.py",
        "domain": "math",
        "extra_of_its_own": 5,
        "host": "127.0.0.1",
        "port": 10101,
    }
    assert (sent["python_version"], sent["notes"]) == ("3.13", {"placement": "a top-level block keeps its keys"})
