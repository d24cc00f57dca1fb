"""NeMo Gym's parser input read as the runtime's job (gym_runtime/nemo_gym/job.py) and a bare
``config_paths`` list read as a package (gym_runtime/package/bare.py): no servers are started.

The global config is the one NeMo RL's ``_spinup`` builds (keys and values as it sets them), over
the built-in quickstart trees laid out without a manifest.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
from omegaconf import DictConfig

from gym_runtime.config import PolicyValues, build_config
from gym_runtime.errors import ConfigError, PackageInvalidError
from gym_runtime.nemo_gym import GlobalConfigDictParserConfig
from gym_runtime.nemo_gym.job import NO_DEADLINE_S, read_job
from tests.helpers.trust import QUICKSTART

POLICY = "responses_api_models/vllm_model/configs/policy_model.yaml"
ARITH = "resources_servers/example_arithmetic/configs/arithmetic.yaml"


def trees(tmp: Path) -> Path:
    """The quickstart's trees without its manifest, as a Gym checkout holds them."""
    root = tmp / "gym"
    shutil.copytree(QUICKSTART, root)
    (root / "nemo-environment.yaml").unlink()
    return root


def nemo_rl_config(**more) -> dict:
    """The keys NeMo RL's ``_spinup`` sets (nemo_rl/environments/nemo_gym.py)."""
    return {
        "config_paths": [POLICY, ARITH],
        "policy_model_name": "acme",
        "policy_api_key": "dummy_key",
        "policy_base_url": ["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"],
        "default_host": "10.0.0.7",
        "port_range_low": 5000,
        "port_range_high": 5999,
        "global_aiohttp_connector_limit_per_host": 16384,
        "global_aiohttp_connector_limit": 65536,
        "ray_head_node_address": "127.0.0.1:6379",
        "head_server": {"host": "0.0.0.0", "port": 5123},
        **more,
    }


def parse(root: Path, initial: dict, dotenv: Path | None = None, argv: tuple[str, ...] = (), skip_cli: bool = True):
    cfg = GlobalConfigDictParserConfig(
        dotenv_path=dotenv, initial_global_config_dict=DictConfig(initial), skip_load_from_cli=skip_cli
    )
    return read_job(cfg, root, list(argv))


def test_nemo_rls_keys_become_the_runtimes_arguments_and_the_rest_stays_in_the_servers_config(tmp_path: Path) -> None:
    root = trees(tmp_path)
    job = parse(root, nemo_rl_config(), dotenv=tmp_path / "absent-env.yaml")
    assert job.package.root == root and job.package.manifest.config_paths == [POLICY, ARITH]
    assert job.policy_base_url == ["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"]
    assert (job.policy_api_key, job.policy_model_name) == ("dummy_key", "acme")
    assert (job.head_host, job.head_port) == ("0.0.0.0", 5123)
    assert job.job_config == (
        {
            "default_host": "10.0.0.7",
            "ray_head_node_address": "127.0.0.1:6379",
            "port_range_low": 5000,
            "port_range_high": 5999,
            "global_aiohttp_connector_limit_per_host": 16384,
            "global_aiohttp_connector_limit": 65536,
        },
        "initial_global_config_dict",
    )
    merged = build_config(
        job.package,
        job_config=job.job_config,
        policy=PolicyValues(job.policy_base_url, job.policy_api_key, job.policy_model_name),
    )
    assert merged.data["global_aiohttp_connector_limit_per_host"] == 16384
    assert merged.data["port_range_low"] == 5000 and set(merged.instances) >= {"policy_model", "arithmetic"}
    assert merged.sources.of("default_host") == "initial_global_config_dict"
    assert merged.data["ray_head_node_address"] == "127.0.0.1:6379"  # the cluster servers join


def test_env_yaml_lies_between_the_files_and_the_initial_dict_and_the_cli_wins(tmp_path: Path) -> None:
    root = trees(tmp_path)
    (root / "env.yaml").write_text(
        "policy_api_key: from-env-yaml\npolicy_model_name: env-model\n"
        "server_spinup_timeout_seconds: 0\nnemo_gym_log_dir: logs/shard-a\n"
    )
    initial = {
        "config_paths": [POLICY, ARITH],
        "policy_model_name": "initial-model",
        "policy_base_url": "http://127.0.0.1:8001/v1",
    }
    job = parse(root, initial, argv=("+port_range_low=6000", "--verbose"), skip_cli=False)
    assert (job.policy_api_key, job.policy_model_name) == ("from-env-yaml", "initial-model")
    assert job.policy_base_url == "http://127.0.0.1:8001/v1" and job.overrides == ["+port_range_low=6000"]
    assert job.startup_timeout_s == NO_DEADLINE_S and job.work_dir == Path("logs/shard-a")
    assert job.job_config == (
        {"server_spinup_timeout_seconds": 0},
        f"initial_global_config_dict over {root / 'env.yaml'}",
    )
    assert parse(root, initial, argv=("+port_range_low=6000",)).overrides == []  # skip_load_from_cli
    skipped = read_job(
        GlobalConfigDictParserConfig(
            initial_global_config_dict=initial, skip_load_from_cli=True, skip_load_from_dotenv=True
        ),
        root,
        [],
    )
    assert skipped.policy_api_key is None and skipped.startup_timeout_s is None


def test_config_paths_that_name_no_trees_are_refused_with_every_entry_named(tmp_path: Path) -> None:
    root = trees(tmp_path)
    (tmp_path / "loose.yaml").write_text("x: 1\n")
    other = tmp_path / "other" / "resources_servers" / "x" / "configs"
    other.mkdir(parents=True)
    (other / "x.yaml").write_text("x: 1\n")
    with pytest.raises(PackageInvalidError) as e:
        parse(
            root,
            {
                "config_paths": [
                    POLICY,
                    "resources_servers/nope/configs/nope.yaml",
                    str(tmp_path / "loose.yaml"),
                    str(other / "x.yaml"),
                ]
            },
        )
    got = {(v.code, v.key) for v in e.value.violations}
    assert got == {
        ("GR-PKG-CONFIG-MISSING", "config_paths[1]"),
        ("GR-PKG-CONFIG-PREFIX", "config_paths[2]"),
        ("GR-PKG-CONFIG-ROOT", "config_paths[3]"),
    }
    assert pickle.loads(pickle.dumps(e.value)).violations == e.value.violations  # crosses a Ray actor whole


def test_a_config_without_config_paths_or_with_a_bad_head_server_is_refused(tmp_path: Path) -> None:
    root = trees(tmp_path)
    with pytest.raises(ConfigError) as e:
        parse(root, {"policy_base_url": "http://127.0.0.1:1/v1"})
    assert e.value.code == "GR-NEMOGYM-CONFIG" and "config_paths" in e.value.message
    with pytest.raises(ConfigError) as e:
        parse(root, {"config_paths": [POLICY], "head_server": "0.0.0.0:5000"})
    assert e.value.code == "GR-NEMOGYM-CONFIG" and pickle.loads(pickle.dumps(e.value)).code == "GR-NEMOGYM-CONFIG"


def test_environments_made_in_the_same_second_get_their_own_run_directories(tmp_path: Path) -> None:
    """Two shards on one host without a ``nemo_gym_log_dir`` each: the run directory (logs, server
    homes) is one per environment, also within one second."""
    from gym_runtime.runtime.bringup import Environment, UpRequest
    from gym_runtime.settings import load_settings

    settings = load_settings({"GYM_RUNTIME_HOME": str(tmp_path / "home")})
    dirs = {Environment(UpRequest(tmp_path), settings).work_dir for _ in range(3)}
    assert len(dirs) == 3 and all(d.parent == (tmp_path / "home" / "runs").resolve() for d in dirs)
    assert not (tmp_path / "home" / "runs").exists()  # nothing is made before the environment starts
