"""``gym-runtime config``: merged, resolved config with secrets masked; policy flags and variables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gym_runtime.cli.main import main
from tests.helpers.packages import make_package

INNER = ("policy_model", "responses_api_models", "policy_stub")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.fixture(autouse=True)
def _clean_policy_env(monkeypatch) -> None:
    for k in ("GYM_RUNTIME_POLICY_BASE_URL", "GYM_RUNTIME_POLICY_API_KEY", "GYM_RUNTIME_POLICY_MODEL_NAME"):
        monkeypatch.delenv(k, raising=False)


def _inner(data: dict) -> dict:
    return data[INNER[0]][INNER[1]][INNER[2]]


def test_flags_fill_policy_values_and_key_is_masked(tmp_path: Path, capsys, monkeypatch) -> None:
    root = make_package(tmp_path / "p", "native-v1")
    monkeypatch.setenv("MY_KEY", "sk-very-secret")
    rc, out, err = run(
        capsys,
        "config",
        str(root),
        "--json",
        "--policy-base-url",
        "http://127.0.0.1:8000/v1",
        "--policy-base-url",
        "http://127.0.0.1:8001/v1",
        "--policy-model-name",
        "m1",
        "--policy-api-key-env",
        "MY_KEY",
    )
    assert rc == 0 and err == ""
    doc = json.loads(out)
    assert "sk-very-secret" not in out
    inner = _inner(doc["config"])
    assert inner["base_url"] == ["http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1"]
    assert inner["model"] == "m1" and inner["api_key"] == "****" and inner["return_token_id_information"] is True
    assert sorted(doc["masked"]) == ["policy_api_key", "policy_model.responses_api_models.policy_stub.api_key"]
    assert {s["name"]: s["secrets"] for s in doc["servers"]} == {  # names only, per server
        "policy_model": ["policy_api_key", "policy_model.responses_api_models.policy_stub.api_key"],
        "acme_math": [],
        "acme_math_agent": [],
        "acme_math_environment_server": [],
    }


def test_environment_variables_and_yaml_dump(tmp_path: Path, capsys, monkeypatch) -> None:
    root = make_package(tmp_path / "p", "wheels-v1")
    monkeypatch.setenv("GYM_RUNTIME_POLICY_BASE_URL", "http://127.0.0.1:9000/v1,http://127.0.0.1:9001/v1")
    monkeypatch.setenv("GYM_RUNTIME_POLICY_API_KEY", "sk-env-secret")
    monkeypatch.setenv("GYM_RUNTIME_POLICY_MODEL_NAME", "envmodel")
    rc, out, _ = run(capsys, "config", str(root), "acme_math.resources_servers.acme_math.port=9300")
    assert rc == 0 and "sk-env-secret" not in out
    body, _, comment = out.rpartition("# masked secrets: ")
    data = yaml.safe_load(body)
    assert _inner(data)["base_url"] == ["http://127.0.0.1:9000/v1", "http://127.0.0.1:9001/v1"]
    assert data["acme_math"]["resources_servers"]["acme_math"]["port"] == 9300
    masked_line, *receives = comment.strip().splitlines()
    assert sorted(masked_line.split(", ")) == [
        "policy_api_key",
        "policy_model.responses_api_models.policy_stub.api_key",
    ]
    assert receives == [
        "# policy_model receives: policy_api_key, policy_model.responses_api_models.policy_stub.api_key",
        "# acme_math receives: no secrets",
        "# acme_math_agent receives: no secrets",
        "# acme_math_environment_server receives: no secrets",
    ]


def test_missing_policy_values_listed_with_sources(tmp_path: Path, capsys) -> None:
    root = make_package(tmp_path / "p", "native-v1")
    rc, out, err = run(capsys, "config", str(root), "--json")
    assert rc == 1
    doc = json.loads(out)["error"]
    assert doc["code"] == "GR-CONFIG-MISSING" and len(doc["violations"]) == 3
    assert all(v["file"] == "responses_api_models/policy_stub/configs/policy_model.yaml" for v in doc["violations"])
    key_hint = next(v["hint"] for v in doc["violations"] if "'policy_api_key'" in v["message"])
    assert key_hint == (
        "export the key as VAR and pass --policy-api-key-env VAR (or export it as "
        "GYM_RUNTIME_POLICY_API_KEY), or add `policy_api_key: ...` to a config in config_paths"
    )
    assert key_hint in err


def test_api_key_env_unset(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("NOT_SET_KEY_VAR", raising=False)
    root = make_package(tmp_path / "p", "native-v1")
    rc, _, err = run(capsys, "config", str(root), "--policy-api-key-env", "NOT_SET_KEY_VAR")
    assert rc == 1 and "NOT_SET_KEY_VAR, which is not set" in err and "GR-SETTINGS" in err
    monkeypatch.setenv("NOT_SET_KEY_VAR", "")
    rc, _, err = run(capsys, "config", str(root), "--policy-api-key-env", "NOT_SET_KEY_VAR")
    assert rc == 1 and "NOT_SET_KEY_VAR, which is set but empty" in err


def test_invalid_package_and_bad_override(tmp_path: Path, capsys) -> None:
    root = make_package(tmp_path / "p", "native-v1")
    (root / "x.jsonl").write_text("{}")
    rc, out, err = run(capsys, "config", str(root), "--json")
    assert rc == 1 and "GR-PKG-JSONL" in err
    # worded for both renderings: --json has no problems printed "above" the hint
    assert json.loads(out)["error"]["hint"] == "fix each problem, then run `gym-runtime validate` again"
    (root / "x.jsonl").unlink()
    rc, _, err = run(capsys, "config", str(root), "not-an-override", "--policy-base-url", "http://127.0.0.1:1/v1")
    assert rc == 1 and "GR-CONFIG-OVERRIDE" in err and "'not-an-override'" in err


EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "native-quickstart")
EXAMPLE_KEY = ("policy_model", "responses_api_models", "vllm_model", "api_key")


def test_base_url_without_a_key_uses_the_keyless_convention_as_up_does(capsys, monkeypatch):
    """Bug: `config PKG --policy-base-url URL` failed on the unset policy_api_key while `up` used EMPTY.
    Bug: that EMPTY was shown as '****', as if a key were set: a value that holds no key is shown as it is."""
    url = "http://127.0.0.1:9/v1"
    for argv in (
        ["--policy-base-url", url, "--policy-model-name", "m"],
        ["policy_base_url=" + url, "policy_model_name=m"],
    ):  # the same values as overrides count the same
        rc, out, _ = run(capsys, "config", EXAMPLE, *argv, "--json")
        doc = json.loads(out)
        inner = doc["config"]
        for k in EXAMPLE_KEY:
            inner = inner[k]
        assert rc == 0 and doc["config"]["policy_api_key"] == "EMPTY" and inner == "EMPTY"
        assert doc["masked"] == [] and all(s["secrets"] == [] for s in doc["servers"])
    rc, out, _ = run(capsys, "config", EXAMPLE, "--policy-base-url", url, "--policy-model-name", "m")
    assert rc == 0 and "policy_api_key: EMPTY\n" in out and "****" not in out
    assert (
        "# policy_api_key: no key given, so EMPTY (what OpenAI clients send to an endpoint without a key); "
        "pass --policy-api-key-env VAR to send one\n"
    ) in out
    rc, _, err = run(capsys, "config", EXAMPLE)  # no policy values at all: still the C02 error
    assert rc == 1 and "policy_base_url" in err


def test_a_given_key_stays_masked_even_beside_the_keyless_value(capsys, monkeypatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-given-secret")
    rc, out, _ = run(
        capsys,
        "config",
        EXAMPLE,
        "--policy-base-url",
        "http://127.0.0.1:9/v1",
        "--policy-model-name",
        "m",
        "--policy-api-key-env",
        "MY_KEY",
    )
    assert rc == 0 and "sk-given-secret" not in out and "policy_api_key: '****'\n" in out
    assert "EMPTY" not in out and "no key given" not in out
    assert "# masked secrets: " in out


def test_passed_variables_are_listed_per_server(tmp_path: Path, capsys, monkeypatch) -> None:
    """``GYM_RUNTIME_SERVER_ENV`` names reach ``config`` per server instance (never a value); an
    entry naming no instance is exit 1 ``GR-SETTINGS-SERVER-ENV``."""
    root = make_package(tmp_path / "p", "native-v1")
    monkeypatch.setenv("GR_TEST_JUDGE_KEY", "sk-judge-secret")
    monkeypatch.setenv("GYM_RUNTIME_SERVER_ENV", "acme_math:GR_TEST_JUDGE_KEY")
    policy = ("--policy-base-url", "http://127.0.0.1:8000/v1", "--policy-model-name", "m1")
    rc, out, _ = run(capsys, "config", str(root), "--json", *policy)
    assert rc == 0 and "sk-judge-secret" not in out
    passed = {s["name"]: s["passed_env"] for s in json.loads(out)["servers"]}
    assert passed == {
        "policy_model": [],
        "acme_math_agent": [],
        "acme_math_environment_server": [],
        "acme_math": [{"name": "GR_TEST_JUDGE_KEY", "scope": "this server", "set": True}],
    }
    rc, out, _ = run(capsys, "config", str(root), *policy)
    assert "# acme_math is passed (GYM_RUNTIME_SERVER_ENV): GR_TEST_JUDGE_KEY (this server)" in out.splitlines()
    monkeypatch.setenv("GYM_RUNTIME_SERVER_ENV", "judge:GR_TEST_JUDGE_KEY")
    rc, out, err = run(capsys, "config", str(root), "--json", *policy)
    assert rc == 1 and json.loads(out)["error"]["code"] == "GR-SETTINGS-SERVER-ENV"
