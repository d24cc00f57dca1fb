"""Server instances and references (docs/architecture.md §4; cases C03, C04, C22 in their own tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_runtime.errors import ConfigError, ServerRefNotFoundError
from tests.helpers.packages import write_server

MODEL = ("responses_api_models", "m")
RS = ("resources_servers", "r")
AG = ("responses_api_agents", "a")


def inst(stype: str, impl: str, **inner) -> dict:
    return {stype: {impl: {"entrypoint": "app.py", **inner}}}


def base() -> dict:
    return {
        "policy_model": inst(*MODEL),
        "res": inst(*RS, domain="math"),
        "agent": inst(
            *AG,
            resources_server={"type": "resources_servers", "name": "res"},
            model_server={"type": "responses_api_models", "name": "policy_model"},
        ),
    }


def _v(err, code: str):
    hits = [v for v in err.violations if v.code == code]
    assert hits, [(v.code, v.message) for v in err.violations]
    return hits


def test_valid_instances(pkg_with, build) -> None:
    m = build(pkg_with({"configs/a.yaml": base()}, [MODEL, RS, AG]))
    # the 0.7 line (the default) fronts the agent with a generated relay, the built-in legacy_agent
    assert list(m.instances) == ["policy_model", "res", "agent", "agent_environment_server"]
    a = m.instances["agent"]
    assert (a.server_type, a.implementation, a.server_dir.origin, a.source) == (
        "responses_api_agents",
        "a",
        "package",
        "configs/a.yaml",
    )
    assert {(r.instance, r.name) for r in m.refs} == {
        ("agent", "res"),
        ("agent", "policy_model"),
        ("agent_environment_server", "agent"),
    }


def test_implementation_found_in_builtins_package_first(pkg_with, build, builtins: Path) -> None:
    write_server(builtins, *AG)
    write_server(builtins, *RS)
    m = build(pkg_with({"configs/a.yaml": base()}, [MODEL, RS]))
    assert m.instances["agent"].server_dir.origin == "builtin"
    assert m.instances["res"].server_dir.origin == "package"


def test_implementation_missing_everywhere(pkg_with, build) -> None:
    with pytest.raises(ConfigError) as e:
        build(pkg_with({"configs/a.yaml": base()}, [MODEL, RS]))
    (v,) = _v(e.value, "GR-CONFIG-IMPLEMENTATION")
    assert v.file == "configs/a.yaml" and v.key == "agent.responses_api_agents.a"
    assert "responses_api_agents/a/" in v.message and "built-in" in v.message


def test_instance_name_with_dot(pkg_with, build) -> None:
    cfg = base()
    cfg["math.v2"] = cfg.pop("res")
    with pytest.raises(ConfigError) as e:
        build(pkg_with({"configs/a.yaml": cfg}, [MODEL, RS, AG]))
    (v,) = e.value.violations
    assert v.code == "GR-CONFIG-INSTANCE-NAME" and v.file == "configs/a.yaml" and v.key == "math.v2"
    assert "contains '.'" in v.message and "math_v2" in v.hint


def test_two_implementations_name_both_and_their_files(pkg_with, build) -> None:
    root = pkg_with(
        {"configs/a.yaml": base(), "configs/b.yaml": {"policy_model": inst("responses_api_models", "n")}},
        [MODEL, RS, AG, ("responses_api_models", "n")],
    )
    with pytest.raises(ConfigError) as e:
        build(root)
    (v,) = e.value.violations
    assert v.code == "GR-CONFIG-TWO-IMPLEMENTATIONS" and v.key == "policy_model.responses_api_models"
    assert "m (configs/a.yaml)" in v.message and "n (configs/b.yaml)" in v.message


def test_two_server_types_in_one_instance(pkg_with, build) -> None:
    cfg = base()
    cfg["res"]["responses_api_agents"] = {"a": {"entrypoint": "app.py"}}
    with pytest.raises(ConfigError) as e:
        build(pkg_with({"configs/a.yaml": cfg}, [MODEL, RS, AG]))
    assert _v(e.value, "GR-CONFIG-INSTANCE-SHAPE")[0].key == "res"


@pytest.mark.parametrize("domain", [None, "", "Math", "mathematics", 3])
def test_resources_server_domain(pkg_with, build, domain) -> None:
    cfg = base()
    inner = cfg["res"]["resources_servers"]["r"]
    if domain is None:
        del inner["domain"]
    else:
        inner["domain"] = domain
    with pytest.raises(ConfigError) as e:
        build(pkg_with({"configs/a.yaml": cfg}, [MODEL, RS, AG]))
    (v,) = _v(e.value, "GR-CONFIG-DOMAIN")
    assert v.key == "res.resources_servers.r.domain" and v.file == "configs/a.yaml" and "math" in v.hint


def test_domain_reported_even_when_implementation_missing(pkg_with, build) -> None:
    cfg = base()
    del cfg["res"]["resources_servers"]["r"]["domain"]
    with pytest.raises(ConfigError) as e:
        build(pkg_with({"configs/a.yaml": cfg}, [MODEL, AG]))
    assert {v.code for v in e.value.violations} == {"GR-CONFIG-DOMAIN", "GR-CONFIG-IMPLEMENTATION"}


def test_duplicate_ports_name_both_instances_and_files(pkg_with, build) -> None:
    cfg = base()
    cfg["res"]["resources_servers"]["r"]["port"] = 9100
    root = pkg_with(
        {"configs/a.yaml": cfg, "configs/b.yaml": {"res2": inst(*RS, domain="math", port=9100)}}, [MODEL, RS, AG]
    )
    with pytest.raises(ConfigError) as e:
        build(root)
    (v,) = _v(e.value, "GR-CONFIG-PORT-DUPLICATE")
    assert "'res' (configs/a.yaml)" in v.message and "'res2' (configs/b.yaml)" in v.message


@pytest.mark.parametrize("port", [0, 70000, "abc", True, 1.5])
def test_bad_port(pkg_with, build, port) -> None:
    cfg = base()
    cfg["res"]["resources_servers"]["r"]["port"] = port
    with pytest.raises(ConfigError) as e:
        build(pkg_with({"configs/a.yaml": cfg}, [MODEL, RS, AG]))
    code = "GR-CONFIG-TYPE" if isinstance(port, str) else "GR-CONFIG-PORT"  # a string that is no integer
    assert [v.key for v in _v(e.value, code)] == ["res.resources_servers.r.port"]


@pytest.mark.parametrize("entry", ["/abs/app.py", "../app.py", "", None, "missing.py"])
def test_bad_entrypoint(pkg_with, build, entry) -> None:
    cfg = base()
    cfg["res"]["resources_servers"]["r"]["entrypoint"] = entry
    with pytest.raises(ConfigError) as e:
        build(pkg_with({"configs/a.yaml": cfg}, [MODEL, RS, AG]))
    assert _v(e.value, "GR-CONFIG-ENTRYPOINT")[0].key == "res.resources_servers.r.entrypoint"


@pytest.mark.parametrize("typo", ["entrypiont", "entry_point", None])
def test_missing_entrypoint_names_the_key_and_a_close_typo(pkg_with, build, typo) -> None:
    cfg = base()
    inner = cfg["res"]["resources_servers"]["r"]
    entry = inner.pop("entrypoint")
    if typo:
        inner[typo] = entry
    with pytest.raises(ConfigError) as e:
        build(pkg_with({"configs/a.yaml": cfg}, [MODEL, RS, AG]))
    (v,) = _v(e.value, "GR-CONFIG-ENTRYPOINT")
    assert v.file == "configs/a.yaml" and v.key == "res.resources_servers.r.entrypoint"
    assert v.message.startswith("instance 'res' has no `entrypoint`") and "None" not in v.message
    if typo:
        assert f"unknown key `{typo}`" in v.message and v.hint == f"did you mean `entrypoint` instead of `{typo}`?"
    else:
        assert v.hint == "Gym servers use `entrypoint: app.py`"


def test_ref_not_found_with_did_you_mean(pkg_with, build) -> None:
    cfg = base()
    cfg["agent"]["responses_api_agents"]["a"]["resources_server"]["name"] = "ress"
    with pytest.raises(ServerRefNotFoundError) as e:
        build(pkg_with({"configs/a.yaml": cfg}, [MODEL, RS, AG]))
    (v,) = e.value.violations
    assert e.value.code == "GR-CONFIG-REF" and v.file == "configs/a.yaml"
    assert v.key == "agent.responses_api_agents.a.resources_server"
    assert "'agent'" in v.message and "resources_servers/ress" in v.message
    assert "Did you mean 'res'?" in v.hint and "Available resources_servers: res" in v.hint


def test_ref_to_type_without_instances_says_none(pkg_with, build) -> None:
    cfg = base()
    del cfg["policy_model"]
    with pytest.raises(ServerRefNotFoundError) as e:
        build(pkg_with({"configs/a.yaml": cfg}, [RS, AG]))
    (v,) = e.value.violations
    assert "Available responses_api_models: (none)" in v.hint and "responses_api_models/policy_model" in v.message


def test_ref_to_instance_of_other_type(pkg_with, build) -> None:
    cfg = base()
    cfg["agent"]["responses_api_agents"]["a"]["resources_server"]["name"] = "policy_model"
    with pytest.raises(ServerRefNotFoundError) as e:
        build(pkg_with({"configs/a.yaml": cfg}, [MODEL, RS, AG]))
    (v,) = e.value.violations
    assert "is a responses_api_models instance, not resources_servers" in v.hint


def test_ref_set_by_override_names_override(pkg_with, build) -> None:
    root = pkg_with({"configs/a.yaml": base()}, [MODEL, RS, AG])
    with pytest.raises(ServerRefNotFoundError) as e:
        build(root, ["agent.responses_api_agents.a.model_server.name=judge"])
    (v,) = e.value.violations
    assert v.file == "override"


def test_refs_reported_before_implementation_problems(pkg_with, build) -> None:
    cfg = base()
    cfg["agent"]["responses_api_agents"]["a"]["model_server"]["name"] = "nope"
    with pytest.raises(ServerRefNotFoundError):
        build(pkg_with({"configs/a.yaml": cfg}, []))


def test_no_instances(pkg_with, build) -> None:
    with pytest.raises(ConfigError) as e:
        build(pkg_with({"configs/a.yaml": {"x": 1}}, []))
    assert e.value.code == "GR-CONFIG-NO-INSTANCES"


def test_instance_copied_by_interpolation_is_checked_too(pkg_with, build) -> None:
    cfg = base()
    cfg["copy.v2"] = "${res}"
    with pytest.raises(ConfigError) as e:
        build(pkg_with({"configs/a.yaml": cfg}, [MODEL, RS, AG]))
    (v,) = e.value.violations
    assert v.code == "GR-CONFIG-INSTANCE-NAME" and v.key == "copy.v2"


def test_interpolation_cycle_reported(pkg_with, build) -> None:
    cfg = {**base(), "a": "${b}", "b": "${a}"}
    with pytest.raises(ConfigError) as e:
        build(pkg_with({"configs/a.yaml": cfg}, [MODEL, RS, AG]))
    assert {v.key for v in e.value.violations} == {"a", "b"}
    assert all("Recursive interpolation" in v.message for v in e.value.violations)
