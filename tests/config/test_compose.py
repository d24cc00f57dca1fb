"""Composition per Gym release line (docs/environment-packages.md, "Composition"): nested config_paths,
templates, agent composition, relays, pairing checks; each error with its file and key."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from gym_runtime.config import build_config
from gym_runtime.errors import ConfigError, MissingValuesError
from gym_runtime.gym_release import release_for
from gym_runtime.package import load_package
from tests.config.conftest import POLICY

R04, R06, R07 = (release_for(v, "test") for v in ("0.4.0", "0.6.0", "0.7.0"))
MODEL = ("responses_api_models", "m")
RS = ("resources_servers", "rs")
AGENT = ("responses_api_agents", "simple_agent")
POLICY_CFG = {"policy_model": {"responses_api_models": {"m": {"entrypoint": "app.py"}}}}


def rs(name: str = "env", **inner) -> dict:
    return {name: {"resources_servers": {"rs": {"entrypoint": "app.py", "domain": "math", **inner}}}}


def agent(name: str, rs_name: str = "env", agent_type: str = "simple_agent", **inner) -> dict:
    return {
        name: {
            "responses_api_agents": {
                agent_type: {
                    "entrypoint": "app.py",
                    "resources_server": {"type": "resources_servers", "name": rs_name},
                    "model_server": {"type": "responses_api_models", "name": "policy_model"},
                    **inner,
                }
            }
        }
    }


def build(root: Path, release, builtins: Path, overrides: list[str] | None = None):
    return build_config(load_package(root), overrides, POLICY, builtin_root=builtins, release=release)


def errors_of(root: Path, release, builtins: Path, overrides: list[str] | None = None) -> dict[str, list]:
    with pytest.raises(ConfigError) as e:
        build(root, release, builtins, overrides)
    out: dict[str, list] = {}
    for v in e.value.violations:
        out.setdefault(v.code, []).append(v)
    return out


# ------------------------------------------------------------------ nested config_paths
@pytest.mark.parametrize("release, winner", [(R04, 2), (R06, 1), (R07, 1)])
def test_nested_precedence_per_release(pkg_with, builtins, release, winner) -> None:
    """0.4-0.5: a file pulled in overrides the file naming it; 0.6+: the including file wins."""
    root = pkg_with(
        {"configs/top.yaml": {"config_paths": ["configs/inner/one.yaml"], **POLICY_CFG, "x": {"v": 1}}}, [MODEL]
    )
    (root / "configs/inner").mkdir()
    (root / "configs/inner/one.yaml").write_text("x: {v: 2, w: 3}\nconfig_paths: [configs/inner/two.yaml]\n")
    (root / "configs/inner/two.yaml").write_text("x: {w: 4}\n")
    m = build(root, release, builtins)
    assert m.data["x"]["v"] == winner
    assert m.data["x"]["w"] == (4 if release is R04 else 3)
    assert m.data["config_paths"] == ["configs/top.yaml", "configs/inner/one.yaml", "configs/inner/two.yaml"]
    assert m.sources.of("x.v") == ("configs/inner/one.yaml" if release is R04 else "configs/top.yaml")
    won = m.sources.overridden["x.v"]
    assert won.winner == m.sources.of("x.v") and len(won.replaced) == 1


def test_nested_problems_name_the_including_file_and_key(pkg_with, builtins) -> None:
    root = pkg_with(
        {
            "configs/top.yaml": {
                "config_paths": ["configs/nowhere.yaml", "../out.yaml", "configs/loop.yaml"],
                **POLICY_CFG,
            }
        },
        [MODEL],
    )
    (root / "configs/loop.yaml").write_text("config_paths: [configs/top.yaml]\n")
    found = errors_of(root, R07, builtins)
    (missing,) = found["GR-CONFIG-NESTED-MISSING"]
    assert (missing.file, missing.key) == ("configs/top.yaml", "config_paths[0]") and "nowhere.yaml" in missing.message
    assert "native-v1" in missing.hint  # this wheels-v1 package vendors no nemo_gym wheel
    (path,) = found["GR-CONFIG-NESTED-PATH"]
    assert (path.file, path.key) == ("configs/top.yaml", "config_paths[1]")
    (cycle,) = found["GR-CONFIG-NESTED-CYCLE"]
    assert (cycle.file, cycle.key) == ("configs/loop.yaml", "config_paths[0]")
    assert "configs/top.yaml -> configs/loop.yaml -> configs/top.yaml" in cycle.message


def test_nested_entry_found_in_the_vendored_nemo_gym_wheel(pkg_with, builtins) -> None:
    """A wheels-v1 package vendoring nemo_gym reaches that wheel's files (Gym's install root)."""
    root = pkg_with(
        {"configs/top.yaml": {"config_paths": ["resources_servers/rs/configs/rs.yaml"], **POLICY_CFG}}, [MODEL, RS]
    )
    wheel = root / "wheels" / "nemo_gym-0.7.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("nemo_gym/__init__.py", "")
        z.writestr("nemo_gym-0.7.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: nemo-gym\nVersion: 0.7.0\n")
        z.writestr("resources_servers/rs/configs/rs.yaml", json.dumps(rs()))
    m = build_config(load_package(root), None, POLICY, builtin_root=builtins)  # the release comes from the wheel
    assert m.release is not None and str(m.release.version) == "0.7.0"
    assert (
        m.instances["env"].source == "resources_servers/rs/configs/rs.yaml (in wheels/nemo_gym-0.7.0-py3-none-any.whl)"
    )


def test_renamed_config_path_is_used_with_a_warning_from_0_6(pkg_with, builtins) -> None:
    old, new = "responses_api_agents/tau2/configs/tau2_agent.yaml", "responses_api_agents/tau2/configs/tau2.yaml"
    root = pkg_with({"configs/top.yaml": {"config_paths": [old], **POLICY_CFG}}, [MODEL])
    (root / new).parent.mkdir(parents=True)
    (root / new).write_text("x: 1\n")
    m = build(root, R06, builtins)
    assert m.data["x"] == 1 and [w.code for w in m.warnings] == ["GR-CONFIG-LEGACY-PATH"]
    assert "GR-CONFIG-NESTED-MISSING" in errors_of(root, R04, builtins)


# ------------------------------------------------------------------ templates
def test_inherit_moves_the_template_and_keeps_provenance(pkg_with, builtins) -> None:
    root = pkg_with(
        {
            "configs/base.yaml": {
                **POLICY_CFG,
                **rs("template", judge="a", keep=1),
                "copied": "${copy:template.resources_servers.rs.keep}",
            },
            "configs/bench.yaml": {"bench": {"_inherit_from": "template", "resources_servers": {"rs": {"judge": "b"}}}},
        },
        [MODEL, RS],
    )
    m = build(root, R04, builtins)
    assert "template" not in m.data and "template" not in m.instances
    assert m.data["bench"]["resources_servers"]["rs"] == {
        "entrypoint": "app.py",
        "domain": "math",
        "judge": "b",
        "keep": 1,
    }
    assert m.data["copied"] == 1
    key = "bench.resources_servers.rs"
    assert m.sources.of(f"{key}.keep") == "configs/base.yaml" and m.sources.of(f"{key}.judge") == "configs/bench.yaml"
    assert m.sources.inherits["bench"] == ("template", "configs/base.yaml")
    won = m.sources.overridden[f"{key}.judge"]
    assert (won.winner, won.replaced) == ("configs/bench.yaml", ("configs/base.yaml",))
    assert m.instances["bench"].source == "configs/bench.yaml"


def test_template_problems_all_at_once_with_file_and_key(pkg_with, builtins) -> None:
    root = pkg_with(
        {
            "configs/a.yaml": {
                **POLICY_CFG,
                **rs("template"),
                "one": {"_inherit_from": "nothing_here"},
                "two": "${inherit_from:template.nope}",
                "three": {"_copy": "nada"},
                "loop_a": {"_inherit_from": "loop_b"},
                "loop_b": {"_inherit_from": "loop_a"},
                "four": {"_inherit_from": "template", "_delete_key": "absent"},
            }
        },
        [MODEL, RS],
    )
    found = errors_of(root, R07, builtins)
    inherit = {v.key: v for v in found["GR-CONFIG-INHERIT"]}
    assert set(inherit) == {"one._inherit_from", "two", "three._copy"}
    assert all(v.file == "configs/a.yaml" for v in inherit.values())
    assert "nothing_here" in inherit["one._inherit_from"].message
    (cycle,) = found["GR-CONFIG-INHERIT-CYCLE"]
    assert cycle.key in ("loop_a", "loop_b") and "loop_a -> loop_b -> loop_a" in cycle.message.replace(
        "loop_b -> loop_a -> loop_b", "loop_a -> loop_b -> loop_a"
    )
    (delete,) = found["GR-CONFIG-DELETE-KEY"]
    assert (delete.file, delete.key) == ("configs/a.yaml", "four") and "absent" in delete.message


def test_delete_key_without_a_template_is_a_warning_as_gym_ignores_it(pkg_with, builtins) -> None:
    root = pkg_with({"configs/a.yaml": {**POLICY_CFG, "x": {"a": 1, "b": 2, "_delete_key": "a, absent"}}}, [MODEL])
    m = build(root, R07, builtins)
    assert m.data["x"] == {"b": 2}
    (w,) = [w for w in m.warnings if w.code == "GR-CONFIG-DELETE-NOTHING"]
    assert w.key == "x" and "absent" in w.message


# ------------------------------------------------------------------ agents
def test_unbound_agent_is_composed_from_0_6_with_renames(pkg_with, builtins) -> None:
    root = pkg_with(
        {
            "configs/a.yaml": {
                **POLICY_CFG,
                **rs(),
                **agent("env_simple_agent", datasets=[{"name": "d"}]),
                **agent("harness", "???", "hermes_agent", turns=3),
            }
        },
        [MODEL, RS, AGENT, ("responses_api_agents", "hermes_agent")],
    )
    m = build(root, R06, builtins, ["env_hermes_agent.responses_api_agents.hermes_agent.turns=5"])
    assert "harness" not in m.data and "env_simple_agent" not in m.data
    inner = m.data["env_hermes_agent"]["responses_api_agents"]["hermes_agent"]
    assert inner["resources_server"]["name"] == "env" and inner["datasets"] == [{"name": "d"}] and inner["turns"] == 5
    assert m.data["agent_map"] == {"env_simple_agent": "env_hermes_agent"}
    with pytest.raises(MissingValuesError) as e:  # 0.4 leaves the unbound agent alone: its name is unset
        build(root, R04, builtins)
    assert "harness.responses_api_agents.hermes_agent.resources_server.name" in [v.key for v in e.value.violations]


def test_pairing_refused_names_the_declaring_key_and_is_waived(pkg_with, builtins, monkeypatch) -> None:
    root = pkg_with(
        {
            "configs/a.yaml": {
                **POLICY_CFG,
                **rs(allowed_agents=["simple_agent"]),
                **agent("env_simple_agent"),
                **agent("harness", "???", "hermes_agent"),
            }
        },
        [MODEL, RS, AGENT, ("responses_api_agents", "hermes_agent")],
    )
    (v,) = errors_of(root, R07, builtins)["GR-CONFIG-PAIRING"]
    assert (v.file, v.key) == ("configs/a.yaml", "env.resources_servers.rs.allowed_agents")
    assert "hermes_agent" in v.message and "NEMO_GYM_ALLOW_UNSUPPORTED_PAIRING" in v.hint
    assert "env_hermes_agent" in build(root, R07, builtins, ["allow_unsupported_pairing=true"]).data
    monkeypatch.setenv("NEMO_GYM_ALLOW_UNSUPPORTED_PAIRING", "1")
    assert "env_hermes_agent" in build(root, R07, builtins).data


def test_model_pairing_is_checked_from_0_7(pkg_with, builtins) -> None:
    root = pkg_with(
        {"configs/a.yaml": {**POLICY_CFG, **rs(allowed_model_types=["vllm_model"]), **agent("env_agent")}},
        [MODEL, RS, AGENT],
    )
    (v,) = errors_of(root, R07, builtins)["GR-CONFIG-PAIRING"]
    assert v.key == "env.resources_servers.rs.allowed_model_types" and "'policy_model' (m)" in v.message
    assert "env_agent" in build(root, R06, builtins).instances


def test_relay_generated_for_an_agent_without_environment_server_from_0_7(pkg_with, builtins) -> None:
    cfg = {**POLICY_CFG, **rs(), **agent("calendar_simple_agent")}
    root = pkg_with({"configs/a.yaml": cfg}, [MODEL, RS, AGENT])
    m = build(root, R07, builtins)
    assert m.data["calendar_environment_server"] == {
        "environment_servers": {
            "legacy_agent": {
                "entrypoint": "app.py",
                "agent_server": {"type": "responses_api_agents", "name": "calendar_simple_agent"},
            }
        }
    }
    assert (
        m.sources.of("calendar_environment_server") == "generated: legacy_agent relay for agent calendar_simple_agent"
    )
    assert not [
        w for w in m.warnings if w.code == "GR-CONFIG-RELAY"
    ]  # written before environment servers: relayed quietly
    assert m.instances["calendar_environment_server"].server_dir.origin == "builtin"  # the built-in relay runs it
    assert "calendar_environment_server" not in build(root, R06, builtins).data
    (v,) = errors_of(root, R07, builtins, ["error_on_agent_without_environment_server=true"])[
        "GR-CONFIG-NO-ENVIRONMENT-SERVER"
    ]
    assert (v.file, v.key) == ("configs/a.yaml", "calendar_simple_agent")
    other = {
        "other_server": {
            "environment_servers": {"legacy_agent": {"entrypoint": "app.py", "agent_server": {"name": "other_agent"}}}
        },
        **agent("other_agent"),
    }
    mixed = pkg_with({"configs/a.yaml": {**cfg, **other}}, [MODEL, RS, AGENT])  # (rewrites the same package)
    (w,) = [w for w in build(mixed, R07, builtins).warnings if w.code == "GR-CONFIG-RELAY"]
    assert "calendar_environment_server" in w.message and "error_on_agent_without_environment_server" in w.hint


def test_environment_server_follows_an_agent_moved_by_inherit_from_0_7(pkg_with, builtins) -> None:
    env = {
        "env_server": {
            "environment_servers": {
                "legacy_agent": {
                    "entrypoint": "app.py",
                    "agent_server": {"type": "responses_api_agents", "name": "base_agent"},
                }
            }
        }
    }
    root = pkg_with(
        {
            "configs/a.yaml": {
                **POLICY_CFG,
                **rs(),
                **agent("base_agent"),
                **env,
                "bench_agent": {"_inherit_from": "base_agent"},
            }
        },
        [MODEL, RS, AGENT],
    )
    m = build(root, R07, builtins)
    assert m.data["env_server"]["environment_servers"]["legacy_agent"]["agent_server"]["name"] == "bench_agent"
    assert "bench_environment_server" not in m.data  # the agent has its environment server


def test_dummy_model_merges_beneath_the_real_model(pkg_with, builtins) -> None:
    root = pkg_with(
        {
            "configs/a.yaml": {
                "policy_model": {
                    "responses_api_models": {"dummy_model": {"entrypoint": "app.py", "a": 1}, "m": {"b": 2}}
                }
            }
        },
        [MODEL],
    )
    m = build(root, R04, builtins)
    assert m.data["policy_model"] == {"responses_api_models": {"m": {"entrypoint": "app.py", "a": 1, "b": 2}}}


def test_skip_verification_reaches_agents_from_0_6(pkg_with, builtins) -> None:
    root = pkg_with(
        {"configs/a.yaml": {**POLICY_CFG, **rs(), **agent("env_agent"), "skip_verification": True}}, [MODEL, RS, AGENT]
    )
    assert build(root, R06, builtins).data["env_agent"]["responses_api_agents"]["simple_agent"]["skip_verification"]
    assert (
        "skip_verification" not in build(root, R04, builtins).data["env_agent"]["responses_api_agents"]["simple_agent"]
    )
