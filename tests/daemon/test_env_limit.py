"""The kernel's cap on one environment string (gym_runtime/supervise/env_limit.py): the limit the
check uses is the one ``execve`` enforces on this host, and a server environment over it is refused
with one ``GR-CONFIG-ENV-TOO-BIG`` block naming the servers, the size, the limit and the biggest keys
(case C61; the whole start is tests/cases/test_c61_env_size.py)."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import pytest
import yaml

from gym_runtime.errors import ConfigError
from gym_runtime.supervise import contract, env_limit
from sandbox import ProcessSpec


def _run_true(name: str, value: str) -> None:
    subprocess.run(["/bin/true"], env={name: value}, check=True)


def test_the_limit_is_the_one_execve_enforces_here() -> None:
    limit = env_limit.max_arg_strlen()
    fits = "x" * (limit - len("BIG=") - 1)  # NAME=value and its NUL: exactly the limit
    assert env_limit.entry_bytes("BIG", fits) == limit
    _run_true("BIG", fits)
    with pytest.raises(OSError) as got:
        _run_true("BIG", fits + "x")
    assert got.value.errno == errno.E2BIG
    assert env_limit.entry_bytes("BIG", fits + "x") == limit + 1


def test_biggest_keys_names_the_deepest_big_key_not_its_parents() -> None:
    view = {
        "judge": {"resources_servers": {"judge": {"entrypoint": "app.py", "rubric": ["criterion " * 20] * 400}}},
        "judge_agent": {"responses_api_agents": {"simple_agent": {"prompt": "p" * 20_000}}},
        "policy_model": {"responses_api_models": {"vllm_model": {"base_url": "http://127.0.0.1:1/v1"}}},
    }
    keys = env_limit.biggest_keys(contract.to_yaml(view))
    assert [k for k, _ in keys] == [
        "judge.resources_servers.judge.rubric",
        "judge_agent.responses_api_agents.simple_agent.prompt",
    ]
    assert keys[0][1] > 80_000 > keys[1][1] > 20_000


def _spec(name: str, private: dict[str, str]) -> ProcessSpec:
    return ProcessSpec(name, ["/bin/true"], Path("/"), {"PATH": "/usr/bin:/bin"}, private_env=private)


def test_a_server_whose_config_is_over_the_limit_is_refused_naming_size_limit_and_key() -> None:
    view = {
        "judge": {"resources_servers": {"judge": {"rubric": [f"criterion {i:05d} " + "y" * 100 for i in range(1300)]}}}
    }
    text = contract.to_yaml(view)
    small = contract.to_yaml({"judge": {"resources_servers": {"judge": {"rubric": ["one"]}}}})
    env_limit.check_specs([_spec("fine", {contract.CONFIG_VAR: small})])  # under the limit: nothing raised
    with pytest.raises(ConfigError) as got:
        env_limit.check_specs(
            [_spec("judge", {contract.CONFIG_VAR: text}), _spec("fine", {contract.CONFIG_VAR: small})]
        )
    err = got.value
    size = env_limit.entry_bytes(contract.CONFIG_VAR, text)
    assert err.code == "GR-CONFIG-ENV-TOO-BIG" and err.exit_code == 1
    assert f"server 'judge' would get NEMO_GYM_CONFIG_DICT of {size:,} bytes" in err.message
    assert "'fine'" not in err.message
    assert f"over {env_limit.max_arg_strlen():,} bytes (MAX_ARG_STRLEN" in err.message
    assert "judge.resources_servers.judge.rubric (" in err.cause
    assert "into a file in the server's directory" in err.hint


def test_another_variable_over_the_limit_is_named_without_config_keys() -> None:
    big = "z" * env_limit.max_arg_strlen()
    with pytest.raises(ConfigError) as got:
        env_limit.check_envs({"judge": {"HUGE_TOKEN": big, contract.CONFIG_VAR: yaml.safe_dump({"a": 1})}})
    assert "server 'judge' would get HUGE_TOKEN of" in got.value.message
    assert "HUGE_TOKEN" in got.value.hint and "NEMO_GYM_CONFIG_DICT" not in got.value.hint
