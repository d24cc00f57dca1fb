"""The host's Gym global config (``NMP_GYM_GLOBAL_CONFIG``): parsed as YAML or JSON, split into
policy values, the head server's port range and one config layer; every unreadable value is one
``GR-HOST-CONFIG`` error naming the variable."""

from __future__ import annotations

import json

import pytest

from gym_runtime.errors import SettingsError
from gym_runtime.host.global_config import DEFAULT_PORT_RANGE, parse_port_range, read_host_job

NEMO_RL_KEYS = {  # the keys NeMo RL's _spinup sets (a list of vLLM replicas), minus ray_head_node_address
    "config_paths": ["resources_servers/acme_math/configs/acme_math.yaml"],
    "policy_model_name": "acme-policy",
    "policy_api_key": "dummy_key",
    "policy_base_url": ["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"],
    "default_host": "127.0.0.1",
    "port_range_low": 5000,
    "port_range_high": 5999,
    "global_aiohttp_connector_limit": 65536,
    "global_aiohttp_connector_limit_per_host": 16384,
    "head_server": {"host": "0.0.0.0", "port": 5123},
}


def test_json_text_splits_into_policy_ports_and_a_layer() -> None:
    job = read_host_job({"NMP_GYM_GLOBAL_CONFIG": json.dumps(NEMO_RL_KEYS)})
    assert job.label == "NMP_GYM_GLOBAL_CONFIG" and job.port_range == (5000, 5999)
    assert job.policy.base_url == NEMO_RL_KEYS["policy_base_url"] and job.policy.model_name == "acme-policy"
    assert job.policy.api_key == "dummy_key" and job.policy.origin == "NMP_GYM_GLOBAL_CONFIG"
    assert job.layer == {
        "default_host": "127.0.0.1",
        "port_range_low": 5000,
        "port_range_high": 5999,
        "global_aiohttp_connector_limit": 65536,
        "global_aiohttp_connector_limit_per_host": 16384,
    }
    assert job.config_paths == tuple(NEMO_RL_KEYS["config_paths"])


def test_yaml_text_and_nemo_helix_name() -> None:
    job = read_host_job(
        {"NHX_GYM_GLOBAL_CONFIG": "policy_model_name: m\nport_range_low: 6000\nport_range_high: 6001\n"}
    )
    assert job.label == "NHX_GYM_GLOBAL_CONFIG" and job.port_range == (6000, 6001) and job.policy.model_name == "m"
    both = read_host_job({"NMP_GYM_GLOBAL_CONFIG": "{}", "NHX_GYM_GLOBAL_CONFIG": "policy_model_name: m"})
    assert both.label == "NMP_GYM_GLOBAL_CONFIG" and both.policy.model_name is None  # NMP's name wins
    assert read_host_job({"NMP_GYM_GLOBAL_CONFIG": "{}"}).port_range == DEFAULT_PORT_RANGE


@pytest.mark.parametrize(
    "environ,says",
    [
        ({}, "NMP_GYM_GLOBAL_CONFIG, which is not set"),
        ({"NMP_GYM_GLOBAL_CONFIG": "  "}, "is set but empty"),
        ({"NMP_GYM_GLOBAL_CONFIG": '{"a": [1}'}, "is not valid YAML at line 1"),
        ({"NMP_GYM_GLOBAL_CONFIG": "- 1"}, "must be a mapping of config keys, got a list"),
        ({"NMP_GYM_GLOBAL_CONFIG": "1: x"}, "top-level key that is not a string: 1"),
        ({"NMP_GYM_GLOBAL_CONFIG": "config_paths: a.yaml"}, "config_paths must be a list"),
        ({"NMP_GYM_GLOBAL_CONFIG": "policy_base_url: []"}, "policy_base_url must be a URL or a non-empty list"),
        ({"NMP_GYM_GLOBAL_CONFIG": "policy_model_name: [m]"}, "policy_model_name must be a string"),
        ({"NMP_GYM_GLOBAL_CONFIG": "port_range_low: 7000\nport_range_high: 6000"}, "low <= high, got 7000-6000"),
        ({"NMP_GYM_GLOBAL_CONFIG": "when: 2026-12-02"}, "NMP_GYM_GLOBAL_CONFIG"),  # a YAML date is no JSON value
    ],
)
def test_unreadable_text_is_one_error_naming_the_variable(environ: dict, says: str) -> None:
    with pytest.raises(SettingsError) as e:
        read_host_job(environ)
    assert e.value.code == "GR-HOST-CONFIG" and e.value.exit_code == 1 and says in e.value.message
    assert e.value.hint


def test_config_paths_must_be_listed_by_the_manifest() -> None:
    job = read_host_job({"NMP_GYM_GLOBAL_CONFIG": json.dumps({"config_paths": ["./a/configs/a.yaml", "b.yaml"]})})
    job.check_config_paths(["a/configs/a.yaml", "b.yaml", "c.yaml"])  # a subset, written either way: fine
    with pytest.raises(SettingsError) as e:
        job.check_config_paths(["a/configs/a.yaml"])
    assert e.value.code == "GR-HOST-CONFIG-PATHS" and "'b.yaml'" in e.value.message
    assert "a/configs/a.yaml" in e.value.hint


def test_port_range_flag() -> None:
    assert parse_port_range("5000-5999") == (5000, 5999)
    for bad in ("5000", "6000-5000", "0-10", "a-b"):
        with pytest.raises(ValueError):
            parse_port_range(bad)
