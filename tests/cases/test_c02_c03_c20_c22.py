"""Cases C02, C03 (a, b), C20 and C22 from ``tests/cases/data``, each built from the case's own files.

The sketches become real native-v1 packages (tests/helpers/cases.py): each config moves under
the server directory of its first instance, so file names are asserted by their tail. The cases were filed against NeMo Gym 0.4, so the
merges run under that release (no ``legacy_agent`` relay is generated; ``no_builtins`` has none).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from gym_runtime.cli.main import main
from gym_runtime.config import PolicyValues, build_config
from gym_runtime.errors import ConfigError, MissingValuesError, ServerRefNotFoundError
from gym_runtime.gym_release import release_for
from gym_runtime.package import load_package
from tests.helpers.cases import case_dir, case_package

CASES_RELEASE = release_for("0.4.0", "the cases' Gym release")


@pytest.fixture
def no_builtins(tmp_path: Path) -> Path:
    d = tmp_path / "no_builtins"
    d.mkdir()
    return d


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


# --- C02: missing env.yaml -> one error listing all three keys -------------------------------------------------


def test_c02_all_three_interpolations_in_one_error(tmp_path: Path, no_builtins: Path, capsys) -> None:
    cp = case_package("C02", tmp_path / "pkg")
    with pytest.raises(MissingValuesError) as e:
        build_config(load_package(cp.root), [], PolicyValues(), builtin_root=no_builtins, release=CASES_RELEASE)
    vs = e.value.violations
    pre = "policy_model.responses_api_models.openai_model."
    assert {v.key for v in vs} == {pre + "openai_base_url", pre + "openai_api_key", pre + "openai_model"}
    assert all(
        v.file == cp.moved["configs/policy_model.yaml"] and v.file.endswith("configs/policy_model.yaml") for v in vs
    )
    text = e.value.render()
    for var in ("policy_base_url", "policy_api_key", "policy_model_name"):
        assert f"references {var!r}" in text
    assert "policy_base_url=VALUE" in text and "policy_model_name=VALUE" in text
    assert "policy_api_key=VALUE" not in text  # API keys never go on a command line: flag naming a variable
    assert "--policy-base-url" in text and "--policy-api-key-env VAR" in text and "config_paths" in text

    code, out, err = cli(capsys, "config", str(cp.root))
    assert code == 1 and out == "" and err.count("[GR-CONFIG-INTERPOLATION]") == 3


def test_c02_fixed_with_env_example(tmp_path: Path, no_builtins: Path) -> None:
    cp = case_package("C02", tmp_path / "pkg")
    env_rel = "responses_api_models/openai_model/configs/env.yaml"
    shutil.copy(case_dir("C02") / "env.example.yaml", cp.root / env_rel)
    m = yaml.safe_load((cp.root / "nemo-environment.yaml").read_text())
    m["config_paths"].append(env_rel)
    (cp.root / "nemo-environment.yaml").write_text(yaml.safe_dump(m))
    # the case's acme_math has no domain, which Gym rejects too (almost-server): supply it as an override
    merged = build_config(
        load_package(cp.root),
        ["acme_math.resources_servers.acme_math.domain=math"],
        PolicyValues(),
        builtin_root=no_builtins,
        release=CASES_RELEASE,
    )
    inner = merged.data["policy_model"]["responses_api_models"]["openai_model"]
    assert inner["openai_base_url"] == "http://127.0.0.1:8000/v1" and inner["openai_model"] == "acme-policy-7b"
    assert set(merged.instances) == {"policy_model", "acme_math", "acme_math_agent"}
    assert merged.redacted()["policy_model"]["responses_api_models"]["openai_model"]["openai_api_key"] == "****"


# --- C03a: reference to an undefined instance ---------------------------------------------------------------------


def test_c03a_server_ref_not_found(tmp_path: Path, no_builtins: Path, capsys) -> None:
    cp = case_package("C03", tmp_path / "pkg")
    with pytest.raises(ServerRefNotFoundError) as e:
        build_config(load_package(cp.root), [], PolicyValues(), builtin_root=no_builtins, release=CASES_RELEASE)
    (v,) = [x for x in e.value.violations if x.code == "GR-CONFIG-REF"]
    # every problem at once: the case's resources server also lacks a domain, reported in the same error
    assert [x.code for x in e.value.violations] == ["GR-CONFIG-REF", "GR-CONFIG-DOMAIN"]
    assert v.key == "acme_quiz_agent.responses_api_agents.multi_turn_agent.user_model_server"
    assert v.file == cp.moved["configs/quiz.yaml"] and v.file.endswith("configs/quiz.yaml")
    assert "responses_api_models/user_model" in v.message and "'acme_quiz_agent'" in v.message
    assert "Available responses_api_models: policy_model" in v.hint
    code, _, err = cli(capsys, "config", str(cp.root))
    assert code == 1 and "ServerRefNotFoundError" in err and "user_model_server" in err


def test_c03a_name_exists_with_another_type(tmp_path: Path, no_builtins: Path) -> None:
    cp = case_package("C03", tmp_path / "pkg")
    key = "acme_quiz_agent.responses_api_agents.multi_turn_agent.user_model_server"
    with pytest.raises(ServerRefNotFoundError) as e:
        build_config(
            load_package(cp.root),
            [f"{key}.type=resources_servers", f"{key}.name=policy_model"],
            PolicyValues(),
            builtin_root=no_builtins,
            release=CASES_RELEASE,
        )
    (v,) = [x for x in e.value.violations if x.code == "GR-CONFIG-REF"]
    assert v.key == key and "resources_servers/policy_model" in v.message
    assert "is a responses_api_models instance" in v.hint and "Available resources_servers: acme_quiz" in v.hint


# --- C03b: two implementations merged into one instance ---------------------------------------------------------


def test_c03b_a_dummy_model_placeholder_is_merged_beneath_the_real_implementation(
    tmp_path: Path, no_builtins: Path
) -> None:
    # NeMo Gym's parser (every release) folds the `dummy_model` placeholder into the real model
    # implementation of the same instance, so the case's placeholder + real model is one instance
    cp = case_package("C03", tmp_path / "pkg", variant="variant_b")
    (tmp_path / "no_builtins" / "responses_api_models" / "openai_model").mkdir(parents=True)
    (tmp_path / "no_builtins" / "responses_api_models" / "openai_model" / "requirements.txt").write_text("")
    (tmp_path / "no_builtins" / "responses_api_models" / "openai_model" / "app.py").write_text("")
    merged = build_config(load_package(cp.root), [], PolicyValues(), builtin_root=no_builtins, release=CASES_RELEASE)
    inst = merged.instances["policy_model"]
    assert (inst.implementation, inst.config["openai_model"]) == ("openai_model", "acme-policy-7b")
    assert "dummy_model" not in merged.data["policy_model"]["responses_api_models"]


def test_c03b_two_real_implementations_in_one_instance_name_both_files(tmp_path: Path, no_builtins: Path) -> None:
    cp = case_package("C03", tmp_path / "pkg", variant="variant_b")
    a, b = cp.moved["configs/placeholder_policy.yaml"], cp.moved["configs/openai_policy.yaml"]
    placeholder = cp.root / a  # the case's placeholder, as a real implementation of another name
    placeholder.write_text(placeholder.read_text().replace("dummy_model", "vllm_model"))
    with pytest.raises(ConfigError) as e:
        build_config(load_package(cp.root), [], PolicyValues(), builtin_root=no_builtins, release=CASES_RELEASE)
    (v,) = e.value.violations
    assert v.code == "GR-CONFIG-TWO-IMPLEMENTATIONS"
    assert (
        f"server instance policy_model has 2 implementations under responses_api_models: vllm_model ({a}), "
        f"openai_model ({b}); exactly one is allowed"
    ) == v.message


# --- C20: ${oc.env:VAR,???} is missing, under the installed OmegaConf --------------------------------------------

KEYS = {
    "policy_model.responses_api_models.openai_model.openai_base_url": "POLICY_BASE_URL",
    "policy_model.responses_api_models.openai_model.openai_api_key": "POLICY_API_KEY",
}


def _c20(tmp_path: Path, no_builtins: Path):
    cp = case_package("C20", tmp_path / "pkg")
    return cp, lambda: build_config(
        load_package(cp.root), [], PolicyValues(), builtin_root=no_builtins, release=CASES_RELEASE
    )


def test_c20_case1_both_unset(tmp_path: Path, no_builtins: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("POLICY_BASE_URL", raising=False)
    monkeypatch.delenv("POLICY_API_KEY", raising=False)
    cp, run = _c20(tmp_path, no_builtins)
    with pytest.raises(MissingValuesError) as e:
        run()
    got = {v.key: v for v in e.value.violations}
    assert set(got) == set(KEYS)
    for key, var in KEYS.items():
        assert var in got[key].message and "is not set" in got[key].message
        assert got[key].file == cp.moved["configs/policy_model.yaml"]
    # API keys never go on a command line: the secret's hint offers the variable and a config file only
    secret = got["policy_model.responses_api_models.openai_model.openai_api_key"]
    assert secret.hint == "export POLICY_API_KEY=<value> before starting, or set it in a config in config_paths"
    url = got["policy_model.responses_api_models.openai_model.openai_base_url"]
    assert url.hint.endswith("or override policy_model.responses_api_models.openai_model.openai_base_url=VALUE")
    code, out, err = cli(capsys, "config", str(cp.root), "--json")
    assert code == 1 and "???" not in out.replace("'${oc.env:POLICY_BASE_URL,???}'", "").replace(
        "'${oc.env:POLICY_API_KEY,???}'", ""
    )
    assert "openai_api_key=" not in out + err and "openai_base_url=VALUE" in err


def test_c20_case2_set_but_empty_counts_as_missing(tmp_path: Path, no_builtins: Path, monkeypatch) -> None:
    monkeypatch.setenv("POLICY_API_KEY", "")
    monkeypatch.setenv("POLICY_BASE_URL", "http://127.0.0.1:8000/v1")
    _, run = _c20(tmp_path, no_builtins)
    with pytest.raises(MissingValuesError) as e:
        run()
    (v,) = e.value.violations
    assert v.key.endswith("openai_api_key") and "POLICY_API_KEY, which is set but empty" in v.message


def test_c20_case3_success_and_masked(tmp_path: Path, no_builtins: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("POLICY_API_KEY", "sk-real-key")
    monkeypatch.setenv("POLICY_BASE_URL", "http://127.0.0.1:8000/v1")
    cp, run = _c20(tmp_path, no_builtins)
    merged = run()
    inner = merged.data["policy_model"]["responses_api_models"]["openai_model"]
    assert inner["openai_api_key"] == "sk-real-key" and "???" not in repr(merged.data)
    code, out, _ = cli(capsys, "config", str(cp.root))
    assert code == 0 and "sk-real-key" not in out and "openai_api_key: '****'" in out
    assert "# masked secrets: policy_model.responses_api_models.openai_model.openai_api_key" in out


# --- C22: an instance name containing a dot -----------------------------------------------------------------------


def test_c22_dotted_instance_name_before_refs(tmp_path: Path, no_builtins: Path, capsys) -> None:
    cp = case_package("C22", tmp_path / "pkg")
    with pytest.raises(ConfigError) as e:
        build_config(load_package(cp.root), [], PolicyValues(), builtin_root=no_builtins, release=CASES_RELEASE)
    assert not isinstance(e.value, (ServerRefNotFoundError, MissingValuesError))
    (v,) = e.value.violations
    f = cp.moved["configs/math_v2.yaml"]
    assert v.code == "GR-CONFIG-INSTANCE-NAME" and v.key == "math.v2" and v.file == f
    assert v.message == (
        f"server instance name 'math.v2' ({f}) contains '.', which config paths and ${{...}} "
        "references treat as a separator"
    )
    assert "math_v2" in v.hint
    code, _, err = cli(capsys, "validate", str(cp.root))
    assert code == 1 and "GR-CONFIG-INSTANCE-NAME" in err and "GR-CONFIG-REF" not in err
