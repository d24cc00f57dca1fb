"""Case C43 (cases README, group G): ``finish_reason: "abort"`` (an engine aborting requests in flight
for a weight update) was scored as a finished answer. Inputs built here: the bundled example's
code_lookup row and a fake endpoint answering the episode's second call (the one after the tool
result) with ``{"finish_reason": "abort", "message": {"content": "Let me"}}``.

Expected: the model server treats ``abort`` as an interruption and asks again under its
``retry_deadline_seconds``; past it the row fails by name (``GR-ROLLOUT-POLICY-UNAVAILABLE``) and is
never sent to ``/verify``; aborted calls are counted in the report (``abt``, ``aborted``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.fake_policy import start_fake
from tests.helpers.trust import dry, example_rows

pytestmark = pytest.mark.pypi
DEADLINE = "policy_model.responses_api_models.vllm_model.retry_deadline_seconds=2"


def test_c43_an_answer_aborted_until_the_retry_deadline_fails_the_row_and_is_never_verified(tmp_path: Path) -> None:
    with start_fake(tmp_path, "abort_after_tool") as fake:
        run, results = dry(tmp_path, example_rows("code_lookup_agent")[:1], DEADLINE, fake_url=fake.url, samples=2)
    assert run.code == 3, run.stderr
    assert [r["error"]["code"] for r in results] == ["GR-ROLLOUT-POLICY-UNAVAILABLE"] * 2
    assert all(r["reward"] is None for r in results)  # /verify never answered for them
    message = results[0]["error"]["message"]
    assert "finish_reason 'abort'" in message and "retry deadline of 2s" in message and "never scored" in message
    assert all(r["aborted_calls"] >= 2 for r in results)
    row = run.json()["rows"][0]
    assert (
        row["aborted"] == sum(r["aborted_calls"] for r in results)
        and run.json()["summary"]["aborted"] == row["aborted"]
    )


def test_c43_an_answer_aborted_once_is_asked_again_scored_and_counted(tmp_path: Path) -> None:
    with start_fake(tmp_path, "abort_once") as fake:
        run, results = dry(tmp_path, example_rows("code_lookup_agent")[:1], fake_url=fake.url, samples=2)
    assert run.code == 0, run.stderr
    assert [(r["error"], r["reward"], r["aborted_calls"]) for r in results] == [(None, 1.0, 1), (None, 1.0, 1)]
    assert run.json()["rows"][0]["aborted"] == 2
