"""Environment servers, NeMo Gym 0.7's fourth server type, in the package and config stages
(docs/architecture.md §3, §4): found by the layout scan and as instances, their agent references
(``agent_server`` may leave out its ``type``), the built-in relay, and one error per instance under
a release line without them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gym_runtime.config import build_config
from gym_runtime.errors import ConfigError, PackageInvalidError, ServerRefNotFoundError
from gym_runtime.gym_release import release_for
from gym_runtime.package import load_package
from gym_runtime.settings import builtin_servers_dir
from tests.config.conftest import POLICY
from tests.helpers.packages import write_manifest, write_server

MODEL, RS, AG, ENV = (
    ("responses_api_models", "m"),
    ("resources_servers", "r"),
    ("responses_api_agents", "a"),
    ("environment_servers", "relay"),
)


def inst(stype: str, impl: str, **inner) -> dict:
    return {stype: {impl: {"entrypoint": "app.py", **inner}}}


def config(**env_inner) -> dict:
    return {
        "policy_model": inst(*MODEL),
        "res": inst(*RS, domain="math"),
        "agent": inst(
            *AG,
            resources_server={"type": "resources_servers", "name": "res"},
            model_server={"type": "responses_api_models", "name": "policy_model"},
        ),
        "res_environment_server": inst(*ENV, **env_inner),
    }


def native(
    root: Path, cfg: dict, servers=(MODEL, RS, AG, ENV), rel: str = "environment_servers/relay/configs/x.yaml"
) -> Path:
    """A native-v1 package whose one config (under ``rel``) is ``cfg``."""
    write_manifest(root, {"format": "native-v1", "config_paths": [rel], "metadata": {"name": "env-servers"}})
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(yaml.safe_dump(cfg, sort_keys=False))
    for server in servers:
        write_server(root, *server)
    return root


def test_an_environment_server_is_an_instance_with_its_agent_reference(tmp_path: Path) -> None:
    m = build_config(
        load_package(native(tmp_path, config(agent_server={"type": "responses_api_agents", "name": "agent"}))),
        policy=POLICY,
    )
    e = m.instances["res_environment_server"]
    assert (e.server_type, e.implementation, e.server_dir.origin) == ("environment_servers", "relay", "package")
    assert {(r.instance, r.server_type, r.name) for r in m.refs if r.instance == "res_environment_server"} == {
        ("res_environment_server", "responses_api_agents", "agent")
    }


def test_agent_server_may_leave_out_its_type(tmp_path: Path) -> None:
    """Gym 0.7.0 ``environment_server_agent_refs``: ``agent_server`` without ``type`` names an agent."""
    m = build_config(load_package(native(tmp_path, config(agent_server={"name": "agent"}))), policy=POLICY)
    (ref,) = [r for r in m.refs if r.instance == "res_environment_server"]
    assert (ref.server_type, ref.name, ref.key) == (
        "responses_api_agents",
        "agent",
        "res_environment_server.environment_servers.relay.agent_server",
    )


def test_a_typeless_agent_server_naming_no_agent_is_a_reference_error(tmp_path: Path) -> None:
    with pytest.raises(ServerRefNotFoundError) as e:
        build_config(load_package(native(tmp_path, config(agent_server={"name": "agnet"}))), policy=POLICY)
    (v,) = e.value.violations
    assert v.code == "GR-CONFIG-REF" and v.key == "res_environment_server.environment_servers.relay.agent_server"
    assert "responses_api_agents/agnet" in v.message and "Did you mean 'agent'?" in v.hint


def test_any_field_referencing_an_agent_counts(tmp_path: Path) -> None:
    """An environment server may front several agents (a user and an assistant), each a field."""
    cfg = config(
        user={"type": "responses_api_agents", "name": "agent"},
        assistant={"type": "responses_api_agents", "name": "nobody"},
    )
    with pytest.raises(ServerRefNotFoundError) as e:
        build_config(load_package(native(tmp_path, cfg)), policy=POLICY)
    assert [v.key for v in e.value.violations] == ["res_environment_server.environment_servers.relay.assistant"]


def test_the_built_in_relay_serves_a_config_that_names_it_without_its_tree(tmp_path: Path) -> None:
    cfg = config(agent_server={"name": "agent"})
    cfg["res_environment_server"] = inst("environment_servers", "legacy_agent", agent_server={"name": "agent"})
    pkg = native(tmp_path, cfg, servers=(MODEL, RS, AG), rel="resources_servers/r/configs/r.yaml")
    m = build_config(load_package(pkg), policy=POLICY, builtin_root=builtin_servers_dir())
    relay = m.instances["res_environment_server"].server_dir
    assert (relay.origin, relay.path) == ("builtin", builtin_servers_dir() / "environment_servers" / "legacy_agent")


@pytest.mark.parametrize(
    "source, fix",
    [
        (
            "GYM_RUNTIME_PIN_NEMO_GYM",
            "run it with GYM_RUNTIME_PIN_NEMO_GYM=0.7.0 or newer (the release now comes from GYM_RUNTIME_PIN_NEMO_GYM)",
        ),
        (
            "wheels/nemo_gym-0.4.0-py3-none-any.whl",
            "vendor nemo-gym 0.7.0 or newer into wheels/ (it replaces wheels/nemo_gym-0.4.0-py3-none-any.whl)",
        ),
    ],
)
def test_under_a_release_without_environment_servers_each_is_one_error(tmp_path: Path, source: str, fix: str) -> None:
    cfg = config(agent_server={"name": "agent"})
    cfg["second_environment_server"] = inst(*ENV, agent_server={"name": "agent"})
    with pytest.raises(ConfigError) as e:
        build_config(load_package(native(tmp_path, cfg)), policy=POLICY, release=release_for("0.4.0", source))
    assert e.value.code == "GR-CONFIG" and [v.code for v in e.value.violations] == ["GR-CONFIG-SERVER-TYPE"] * 2
    v = e.value.violations[0]
    assert (v.file, v.key) == ("environment_servers/relay/configs/x.yaml", "res_environment_server.environment_servers")
    assert (
        "'res_environment_server' has server type environment_servers, but NeMo Gym 0.4.0 (release line 0.4) "
        "has no environment_servers"
        in v.message
        and "arrived in NeMo Gym 0.7.0" in v.message
    )
    assert v.hint.startswith(fix)


def test_the_layout_scan_checks_environment_server_trees(tmp_path: Path) -> None:
    native(tmp_path, config(agent_server={"name": "agent"}))
    (tmp_path / "environment_servers" / "relay" / "requirements.txt").unlink()
    with pytest.raises(PackageInvalidError) as e:
        load_package(tmp_path)
    assert [(v.code, v.file) for v in e.value.violations] == [
        ("GR-PKG-SERVER-NO-INSTALL", "environment_servers/relay/")
    ]
