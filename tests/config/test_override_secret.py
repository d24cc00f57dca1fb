"""A secret given as a ``KEY=VALUE`` override is refused (argv is readable by every user of the host),
with the hint to pass it through an environment variable; the value is never echoed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_runtime.cli.main import main

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "native-quickstart")
FLAGS = ["--policy-base-url", "http://127.0.0.1:9/v1", "--policy-model-name", "m"]


@pytest.mark.parametrize(
    "override",
    [
        "policy_api_key=sk-live-123",
        "+policy_api_key=sk-live-123",
        "policy_model.responses_api_models.vllm_model.api_key=sk-live-123",
        "judge.auth_token=sk-live-123",
    ],
)
def test_secret_override_is_refused_with_the_variable_hint(override: str, capsys) -> None:
    code = main(["config", EXAMPLE, *FLAGS, override])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert "[GR-CONFIG-OVERRIDE-SECRET]" in err and "sk-live-123" not in err
    assert "environment variable" in err and "${oc.env:VAR}" in err
    if "policy_api_key" in override:
        assert "--policy-api-key-env VAR" in err


def test_a_reference_to_a_variable_and_token_flags_are_fine(monkeypatch, capsys) -> None:
    monkeypatch.setenv("ACME_KEY", "sk-from-env")
    code = main(
        ["config", EXAMPLE, *FLAGS, "policy_api_key=${oc.env:ACME_KEY}", "return_token_id_information=false", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["config"]["policy_api_key"] == "****" and out["config"]["return_token_id_information"] is False
