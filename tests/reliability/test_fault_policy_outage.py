"""Fault: the policy endpoint goes away in the middle of a batch and comes back (a vLLM restarting
during a weight refit).

Expected (docs/reliability.md, "Retries and deadlines"): the model server (built-in ``vllm_model``)
sends each chat completion again with backoff until ``retry_deadline_seconds`` (600 s by default;
scaled down here with that same setting, the outage scaled with it): rows wait and finish once the
endpoint is back. Past the deadline each waiting row gets ``GR-ROLLOUT-POLICY-UNAVAILABLE`` naming
the endpoint and the deadline. No row is ever scored while its policy was unreachable."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.helpers.environments import StubEndpoint, running_up, shared_venvs, stop_cleanly
from tests.helpers.load import EXAMPLES, example_rows, restarts, run_batch, unanswered

pytestmark = [pytest.mark.pypi, pytest.mark.slow]
DEADLINE = "policy_model.responses_api_models.vllm_model.retry_deadline_seconds"
OUTAGE_S = 6.0  # stands for a 20 s restart: the deadline below is scaled by the same factor


def _up(tmp: Path, stub: StubEndpoint, deadline_s: float):
    return running_up(
        EXAMPLES / "native-quickstart",
        tmp,
        f"{DEADLINE}={deadline_s}",
        "--policy-base-url",
        stub.url,
        "--policy-model-name",
        stub.model,
        env=shared_venvs(),
    )


def test_rows_wait_for_a_policy_endpoint_that_comes_back_within_the_deadline(tmp_path: Path) -> None:
    with StubEndpoint(tmp_path) as stub, _up(tmp_path, stub, 30) as (proc, info):
        head = info["head_server"]
        rows = example_rows(60)
        out: dict = {}
        client = threading.Thread(target=lambda: out.update(batch=run_batch(head, rows, concurrency=20, timeout=300)))
        client.start()
        time.sleep(0.5)
        stub.kill()  # rows in flight lose their completion, the next ones find nobody listening
        time.sleep(OUTAGE_S)
        stub.start()
        client.join(240)
        assert not client.is_alive(), "the batch did not finish"
        batch = out["batch"]
        assert unanswered(batch.results, 60) == []
        assert [r for r in batch.results if "error" in r] == []  # every row finished, none failed
        assert all(r["reward"] in (0.0, 1.0) for r in batch.results)
        assert max(batch.latency_s) >= OUTAGE_S - 1  # some rows did wait out the outage
        assert not any(restarts(head).values())  # nothing was restarted: the rows waited
        code, err = stop_cleanly(proc)
        assert code == 0 and "Traceback" not in err


def test_rows_fail_clearly_once_the_deadline_passes(tmp_path: Path) -> None:
    with StubEndpoint(tmp_path) as stub, _up(tmp_path, stub, 2) as (proc, info):
        head = info["head_server"]
        stub.kill()
        t0 = time.monotonic()
        down = run_batch(head, example_rows(12), concurrency=12, timeout=120)
        assert time.monotonic() - t0 < 60
        assert unanswered(down.results, 12) == []
        for r in down.results:  # no row got a reward (a silent 0) while its policy was unreachable
            assert "reward" not in r, r
            error = r["error"]
            assert error["code"] == "GR-ROLLOUT-POLICY-UNAVAILABLE", error
            assert f"model endpoint {stub.url}" in error["message"] and "retry deadline of 2s" in error["message"]
        stub.start()
        back = run_batch(head, example_rows(12), concurrency=12, timeout=120)
        assert [r for r in back.results if "error" in r] == []
        code, err = stop_cleanly(proc)
        assert code == 0 and "Traceback" not in err
