"""Contract tests of the example resources servers over real HTTP."""

from __future__ import annotations

import httpx

from tests.servers.conftest import arithmetic_row, lookup_row


def post(url: str, body: dict) -> httpx.Response:
    return httpx.post(url, json=body, timeout=30, trust_env=False)


def answer(text: str, calls: list[dict] | None = None) -> dict:
    """A Responses object whose output is ``calls`` then one assistant message ``text``."""
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    return {"id": "resp_1", "object": "response", "output": [*(calls or []), message]}


def get_code_call(key: str) -> dict:
    return {
        "type": "function_call",
        "call_id": "c1",
        "id": "c1",
        "name": "get_code",
        "arguments": f'{{"key": "{key}"}}',
    }


def test_seed_session_and_liveness(chain):
    for name in ("lookup", "arithmetic"):
        assert post(chain[name] + "/seed_session", {"responses_create_params": {"input": []}}).json() == {}
        assert httpx.get(chain[name] + "/", trust_env=False).json() == {"status": "ok"}


def test_lookup_tool_and_reward_depend_on_the_final_answer(chain):
    code = post(chain["lookup"] + "/get_code", {"key": "alpha"}).json()
    assert code["key"] == "alpha" and code["code"].startswith("CODE-")
    row = lookup_row("alpha")
    right = post(
        chain["lookup"] + "/verify", {**row, "response": answer(f"It is {code['code']}", [get_code_call("alpha")])}
    )
    assert right.status_code == 200
    assert right.json()["reward"] == 1.0 and right.json()["called_tool"] is True and right.json()["key"] == "alpha"
    wrong = post(
        chain["lookup"] + "/verify", {**row, "response": answer("It is CODE-000000", [get_code_call("alpha")])}
    )
    assert wrong.json()["reward"] == 0.0
    no_call = post(chain["lookup"] + "/verify", {**row, "response": answer(f"It is {code['code']}")})
    assert no_call.json()["reward"] == 0.0 and no_call.json()["called_tool"] is False


def test_lookup_tool_rejects_bad_arguments(chain):
    reply = post(chain["lookup"] + "/get_code", {"city": "x"})
    assert reply.status_code == 422


def test_arithmetic_reward_checks_the_last_number(chain):
    row = arithmetic_row("What is 12 + 7 * 3?")
    assert (
        post(chain["arithmetic"] + "/verify", {**row, "response": answer("The answer is 33.")}).json()["reward"] == 1.0
    )
    assert (
        post(chain["arithmetic"] + "/verify", {**row, "response": answer("The answer is 32.")}).json()["reward"] == 0.0
    )
    keyed = arithmetic_row("Compute the total.", answer="10")
    result = post(chain["arithmetic"] + "/verify", {**keyed, "response": answer("5 and 5 make 10")}).json()
    assert result["reward"] == 1.0 and result["expected"] == 10.0 and result["extracted"] == 10.0


def test_an_expression_too_deep_to_evaluate_is_no_expected_value(chain):
    """A prompt summing a thousand terms (a context-overflow row against a real engine) was a 500
    (RecursionError) from /verify: now it has no expected value and scores 0.0."""
    row = arithmetic_row("What is " + " + ".join(["1"] * 2000) + "?")
    result = post(chain["arithmetic"] + "/verify", {**row, "response": answer("")})
    assert result.status_code == 200 and result.json()["reward"] == 0.0


def test_verify_without_response_is_422(chain):
    for name in ("lookup", "arithmetic"):
        reply = post(chain[name] + "/verify", {})
        assert reply.status_code == 422
        missing = {tuple(e["loc"])[-1] for e in reply.json()["detail"]}
        assert missing == {"responses_create_params", "response"}


def test_aggregate_metrics_groups_by_task(chain):
    rows = [
        {"_ng_task_index": 0, "reward": 1.0},
        {"_ng_task_index": 0, "reward": 0.0},
        {"_ng_task_index": 1, "reward": 1.0},
    ]
    metrics = post(chain["arithmetic"] + "/aggregate_metrics", {"verify_responses": rows}).json()
    assert metrics["agent_metrics"]["mean/reward"] == 2 / 3
    assert metrics["key_metrics"] == {"mean/reward": 2 / 3}
    assert [g["mean/reward"] for g in metrics["group_level_metrics"]] == [0.5, 1.0]
    assert post(chain["lookup"] + "/aggregate_metrics", {"verify_responses": []}).json()["agent_metrics"] == {}
