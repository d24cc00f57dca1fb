"""Merge order, provenance, overrides, and one report of every missing value (docs/architecture.md §4, C02/C20)."""

from __future__ import annotations

import pytest

from gym_runtime.config import PolicyValues
from gym_runtime.errors import ConfigError, MissingValuesError

MODEL = ("responses_api_models", "m")


def policy_cfg(**inner) -> dict:
    return {"policy_model": {"responses_api_models": {"m": {"entrypoint": "app.py", **inner}}}}


def test_later_files_win_then_overrides_then_policy(pkg_with, build) -> None:
    root = pkg_with(
        {
            "configs/a.yaml": {**policy_cfg(base_url="${policy_base_url}", temp=1), "x": {"y": 1, "z": 1}},
            "configs/b.yaml": {"x": {"y": 2}, "policy_base_url": "http://file/v1"},
        },
        [MODEL],
    )
    m = build(
        root,
        ["x.z=3", "++x.w=4", "policy_model_name=from-override"],
        PolicyValues(["http://a/v1", "http://b/v1"], None, None),
    )
    assert m.data["x"] == {"y": 2, "z": 3, "w": 4}
    assert m.data["policy_base_url"] == ["http://a/v1", "http://b/v1"]
    assert m.data["policy_model"]["responses_api_models"]["m"]["base_url"] == ["http://a/v1", "http://b/v1"]
    assert m.data["policy_model_name"] == "from-override"
    assert m.sources.of("x.y") == "configs/b.yaml" and m.sources.of("x.z") == "override"
    assert m.sources.of("policy_model.responses_api_models.m.temp") == "configs/a.yaml"
    assert m.sources.of("policy_base_url").startswith("--policy-base-url")


def test_missing_and_interpolations_all_reported_at_once(pkg_with, build) -> None:
    root = pkg_with(
        {
            "configs/a.yaml": {
                **policy_cfg(
                    base_url="${policy_base_url}",
                    api_key="${policy_api_key}",
                    model="${policy_model_name}",
                    judge="???",
                    other="${nowhere.deep}",
                    env="${oc.env:GR_TEST_UNSET_VAR}",
                )
            }
        },
        [MODEL],
    )
    with pytest.raises(MissingValuesError) as e:
        build(root, policy=None)
    err = e.value
    assert err.code == "GR-CONFIG-MISSING" and err.exit_code == 1
    pre = "policy_model.responses_api_models.m."
    by_key = {v.key: v for v in err.violations}
    assert set(by_key) == {pre + k for k in ("base_url", "api_key", "model", "judge", "other", "env")}
    assert all(v.file == "configs/a.yaml" for v in err.violations)
    assert "--policy-base-url" in by_key[pre + "base_url"].hint
    assert "--policy-api-key-env" in by_key[pre + "api_key"].hint
    assert "--policy-model-name" in by_key[pre + "model"].hint
    assert "'???'" in by_key[pre + "judge"].message and f"{pre}judge=" in by_key[pre + "judge"].hint
    assert "nowhere.deep" in by_key[pre + "other"].message
    assert "GR_TEST_UNSET_VAR" in by_key[pre + "env"].message and "export GR_TEST_UNSET_VAR" in by_key[pre + "env"].hint


def test_top_level_missing_policy_key_hint_names_flag(pkg_with, build) -> None:
    root = pkg_with({"configs/a.yaml": {**policy_cfg(), "policy_api_key": "???"}}, [MODEL])
    with pytest.raises(MissingValuesError) as e:
        build(root, policy=None)
    (v,) = e.value.violations
    assert v.key == "policy_api_key" and "--policy-api-key-env" in v.hint
    assert "=VALUE" not in v.hint and "override" not in v.hint  # API keys never go on a command line


def test_secret_hints_never_suggest_a_command_line(pkg_with, build) -> None:
    root = pkg_with(
        {"configs/a.yaml": {**policy_cfg(api_key="???", auth_token="${vault_token}", judge="???", other="${nowhere}")}},
        [MODEL],
    )
    with pytest.raises(MissingValuesError) as e:
        build(root, policy=None)
    pre = "policy_model.responses_api_models.m."
    by_key = {v.key: v for v in e.value.violations}
    for secret in ("api_key", "auth_token"):
        hint = by_key[pre + secret].hint
        assert "config" in hint and "=VALUE" not in hint and "override" not in hint, hint
    assert by_key[pre + "judge"].hint.endswith(f"or give the override {pre}judge=VALUE")
    assert by_key[pre + "other"].hint.endswith("or give the override nowhere=VALUE")


def test_missing_value_inside_list_and_resolver_default(pkg_with, build, monkeypatch) -> None:
    monkeypatch.delenv("GR_TEST_UNSET_VAR", raising=False)
    root = pkg_with(
        {
            "configs/a.yaml": {
                **policy_cfg(
                    urls=["ok", "???"],
                    key="${oc.env:GR_TEST_UNSET_VAR,???}",
                    dec="${oc.decode:${oc.env:GR_TEST_UNSET_VAR,???}}",
                )
            }
        },
        [MODEL],
    )
    with pytest.raises(MissingValuesError) as e:
        build(root)
    keys = {v.key for v in e.value.violations}
    pre = "policy_model.responses_api_models.m."
    assert keys == {pre + "urls[1]", pre + "key", pre + "dec"}


def test_an_empty_default_of_the_authors_own_is_accepted_an_empty_variable_is_not(pkg_with, build, monkeypatch) -> None:
    # NeMo Gym 0.7.0's optional keys read `${oc.env:VAR,''}`: Gym resolves them to '' and so does the
    # runtime; a variable set but empty, read without a default of the author's own, is still missing
    monkeypatch.delenv("GR_TEST_UNSET_VAR", raising=False)
    monkeypatch.setenv("GR_TEST_EMPTY_VAR", "")
    ok = build(
        pkg_with(
            {"configs/a.yaml": policy_cfg(opt="${oc.env:GR_TEST_UNSET_VAR,''}", also="${oc.env:GR_TEST_EMPTY_VAR,''}")},
            [MODEL],
        )
    )
    assert ok.instances["policy_model"].config["opt"] == "" == ok.instances["policy_model"].config["also"]
    with pytest.raises(MissingValuesError) as e:
        build(
            pkg_with(
                {
                    "configs/a.yaml": policy_cfg(
                        key="${oc.env:GR_TEST_EMPTY_VAR}", req="${oc.env:GR_TEST_EMPTY_VAR,???}"
                    )
                },
                [MODEL],
            )
        )
    assert {v.key.rsplit(".", 1)[1] for v in e.value.violations} == {"key", "req"}


def test_no_leaf_is_still_the_missing_marker(pkg_with, build) -> None:
    root = pkg_with({"configs/a.yaml": {**policy_cfg(), "marker": "${oc.decode:'???'}"}}, [MODEL])
    with pytest.raises(MissingValuesError) as e:
        build(root)
    assert [v.key for v in e.value.violations] == ["marker"]


@pytest.mark.parametrize(
    "body,expect",
    [
        ("a: [1\n", "line"),
        ("- a\n", "mapping"),
        (b"a: \xff\n", "UTF-8"),
        ("1: x\n", "strings"),
        ("a: 2020-01-01\n", "date"),
        ("a: !!binary aGVsbG8=\n", "bytes"),
        ("a: !!set {x}\n", "set"),
    ],
)
def test_bad_config_files_name_the_file(pkg_with, build, body, expect) -> None:
    root = pkg_with({"configs/a.yaml": policy_cfg(), "configs/bad.yaml": body}, [MODEL])
    with pytest.raises(ConfigError) as e:
        build(root)
    (v,) = e.value.violations
    assert v.code == "GR-CONFIG-YAML" and v.file == "configs/bad.yaml" and expect in v.message


def test_empty_config_file_is_fine(pkg_with, build) -> None:
    root = pkg_with({"configs/a.yaml": policy_cfg(), "configs/empty.yaml": ""}, [MODEL])
    assert "policy_model" in build(root).instances


def test_merge_conflict_names_both_files(pkg_with, build) -> None:
    root = pkg_with({"configs/a.yaml": {**policy_cfg(), "x": {"y": 1}}, "configs/b.yaml": {"x": [1, 2]}}, [MODEL])
    with pytest.raises(ConfigError) as e:
        build(root)
    text = e.value.render()
    assert "configs/b.yaml" in text and "configs/a.yaml" in text and e.value.code == "GR-CONFIG-MERGE"


def test_dict_overrides_in_gyms_hydra_syntax(pkg_with, build) -> None:
    """``fan_out={K:[A,B]}`` and ``+agent_map={a:b}`` as Gym's Hydra reads them (YAML took ``{a:b}`` for
    a key ``a:b`` and refused ``{K:[A,B]}``); values typed as Hydra types them, interpolations kept."""
    root = pkg_with({"configs/a.yaml": {**policy_cfg(), "n": 5, "agent_map": {"old": "x"}}}, [MODEL])
    m = build(
        root,
        [
            "fan_out={K:[A,B]}",
            "+agent_map={a:b, _default: c}",
            "++extra={i:1,f:2.5,t:true,z:null,s:'x, y',nested:{l:[1,{q:r}]},ref:${n}}",
        ],
    )
    assert m.data["fan_out"] == {"K": ["A", "B"]}
    assert m.data["agent_map"] == {"old": "x", "a": "b", "_default": "c"}  # a dict override merges into the file's
    want = {"i": 1, "f": 2.5, "t": True, "z": None, "s": "x, y", "nested": {"l": [1, {"q": "r"}]}, "ref": 5}
    assert m.data["extra"] == want
    assert m.sources.of("fan_out.K") == "override"


@pytest.mark.parametrize("ov", ["fan_out={K:[A,B]", "agent_map={a:b,,}", "x=[1,{a:}]"])
def test_a_broken_dict_override_names_it_and_the_syntax(pkg_with, build, ov) -> None:
    root = pkg_with({"configs/a.yaml": policy_cfg()}, [MODEL])
    with pytest.raises(ConfigError) as e:
        build(root, [ov])
    (v,) = [v for v in e.value.violations if v.code == "GR-CONFIG-OVERRIDE"]
    assert repr(ov) in v.message and "write a dict as {key:value,...}" in (v.hint or "")


@pytest.mark.parametrize("ov", ["novalue", "=3", "a=[1,", "a.b=1\x00", "a..b=1", "a=!!binary aGk="])
def test_bad_overrides(pkg_with, build, ov) -> None:
    root = pkg_with({"configs/a.yaml": policy_cfg()}, [MODEL])
    with pytest.raises(ConfigError) as e:
        build(root, [ov])
    assert e.value.exit_code == 1 and (repr(ov) in e.value.render() or "override" in e.value.render())


def test_merging_layers_leaves_them_unchanged_so_a_second_merge_sees_the_same_replacements() -> None:
    # composition merges the files once beneath held-back overrides and again with them; the first
    # merge must not write a later layer's list into an earlier layer's data (it hid case C19's report)
    from gym_runtime.config.merge import merge_layers

    layers = [({"sandbox": {"egress_allowlist": ["a", "b"]}}, "A"), ({"sandbox": {"egress_allowlist": ["c"]}}, "B")]
    merge_layers(layers)
    assert layers[0][0] == {"sandbox": {"egress_allowlist": ["a", "b"]}}
    _, sources = merge_layers(layers)
    assert sources.replaced_lists["sandbox.egress_allowlist"].replaced == ("A",)
