"""Case C42 (cases README, group G): reasoning is sent back under both ``reasoning`` and
``reasoning_content``, and a frontend that treats them as one field answers turn 2 with 400
``duplicate field 'reasoning'``. Inputs built here: the bundled example with
``uses_reasoning_parser: true`` on its policy model, the code_lookup agent (``max_steps: 4``), and a
fake endpoint that answers turn 1 with reasoning (in ``reasoning``) and a ``get_code`` call and
refuses any request whose assistant message carries both keys.

Expected: a ``reasoning_field: both|reasoning|reasoning_content`` setting on the model server (Gym
0.7.0 parity); the start-up probe (two turns under ``--probe-policy``, and whenever rows offer
tools) fails the start naming it (``GR-START-REASONING-FIELD``); the row error names it
(``GR-ROLLOUT-REASONING-FIELD``); with ``reasoning_field: reasoning`` the rollouts run.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.helpers.environments import running_up, shared_venvs, stop_cleanly
from tests.helpers.fake_policy import DUPLICATE_TEXT, start_fake
from tests.helpers.load import run_batch
from tests.helpers.trust import ENV, MODEL, QUICKSTART, dry, example_rows

pytestmark = pytest.mark.pypi
MODEL_KEY = "policy_model.responses_api_models.vllm_model"
PARSER = f"{MODEL_KEY}.uses_reasoning_parser=true"


def test_c42_the_row_error_names_reasoning_field(tmp_path: Path) -> None:
    """``up`` (which knows no rows: its start-up probe is the plain turn) and ``/rollouts/run``."""
    with (
        start_fake(tmp_path, "duplicate_reasoning") as fake,
        running_up(
            QUICKSTART,
            tmp_path,
            PARSER,
            "--policy-base-url",
            fake.url + "/v1",
            "--policy-model-name",
            MODEL,
            env={**ENV, **shared_venvs()},
        ) as (proc, info),
    ):
        [result] = run_batch(info["head_server"], example_rows("code_lookup_agent")[:1]).results
        code, err = stop_cleanly(proc)
    assert code == 0, err
    assert result["error"]["code"] == "GR-ROLLOUT-REASONING-FIELD"
    message = result["error"]["message"]
    assert DUPLICATE_TEXT in message and "reasoning_field: both" in message
    assert "set reasoning_field: reasoning or reasoning_content in the config of 'policy_model'" in message


@pytest.mark.parametrize("probe", [[], ["--probe-policy"]])
def test_c42_the_start_up_probe_sends_the_reasoning_back_and_names_the_setting(tmp_path: Path, probe: list) -> None:
    """The dry-run's rows offer tools, so its probe has a second turn even without --probe-policy."""
    with start_fake(tmp_path, "duplicate_reasoning") as fake:
        run, results = dry(tmp_path, example_rows("code_lookup_agent")[:1], PARSER, *probe, fake_url=fake.url)
    assert run.code == 3 and results == [], run.stderr
    error = run.json()["error"]
    assert error["code"] == "GR-START-REASONING-FIELD" and DUPLICATE_TEXT in error["message"]
    assert "set reasoning_field: reasoning or reasoning_content in the config of 'policy_model'" in error["hint"]


def test_c42_reasoning_field_reasoning_sends_one_key_and_the_rollouts_run(tmp_path: Path) -> None:
    with start_fake(tmp_path, "duplicate_reasoning") as fake:
        run, results = dry(
            tmp_path,
            example_rows("code_lookup_agent")[:1],
            PARSER,
            f"{MODEL_KEY}.reasoning_field=reasoning",
            "--probe-policy",
            fake_url=fake.url,
        )
        sent = httpx.get(fake.url + "/fake/requests", timeout=10, trust_env=False).json()
    assert run.code == 0, run.stderr
    assert results[0]["error"] is None and results[0]["reward"] == 1.0
    replayed = [m for body in sent for m in body["messages"] if m["role"] == "assistant" and m.get("reasoning")]
    assert replayed and all("reasoning_content" not in m for m in replayed)
