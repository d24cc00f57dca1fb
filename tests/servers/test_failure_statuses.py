"""The status of a built-in server's error answer is the class a trainer retries it by
(docs/rollouts.md, "Failure classes"): a row the agent or model server cannot read, or that an
upstream refused with 400/413/422, is answered with that 4xx (the row's data); an upstream that is
down, silent or breaks its contract stays a 502 (infrastructure). Over the shared chain of real
server processes (tests/servers/conftest.py)."""

from __future__ import annotations

import httpx
import pytest

from tests.servers.conftest import lookup_row


def run(chain, agent: str, row: dict) -> httpx.Response:
    return httpx.post(chain[agent] + "/run", json=row, timeout=60, trust_env=False)


def with_params(**params) -> dict:
    row = lookup_row()
    return {**row, "responses_create_params": {**row["responses_create_params"], **params}}


@pytest.mark.parametrize(
    "params, said",
    [
        ({"input": 5}, "input must be a string or a list"),
        ({"tools": "get_code"}, "tools must be a list"),
    ],
    ids=["input-a-number", "tools-a-string"],
)
def test_a_row_the_agent_cannot_read_is_a_422(chain, params: dict, said: str) -> None:
    reply = run(chain, "lookup_agent", with_params(**params))
    assert reply.status_code == 422 and said in reply.text


@pytest.mark.parametrize(
    "params, said",
    [
        ({"metadata": {"extra_body": "{not json"}}, "metadata.extra_body is not valid JSON"),
        ({"input": [{"type": "function_call", "name": "get_code", "arguments": "{}"}]}, "KeyError"),
        ({"input": [{"role": "user", "content": [5]}]}, "AttributeError"),
    ],
    ids=["metadata-not-json", "call-without-call-id", "content-part-a-number"],
)
def test_a_row_the_model_server_cannot_read_is_a_422_through_the_agent(chain, params: dict, said: str) -> None:
    """Before: the model server's 422 (or its 500 for an item of the wrong shape) became the agent's
    502, which a trainer retries five times as infrastructure."""
    reply = run(chain, "lookup_agent", with_params(**params))
    assert reply.status_code == 422, reply.text
    error = reply.json()["error"]
    assert error["type"] == "upstream_error" and error["upstream"] == "policy_model" and error["upstream_status"] == 422
    assert said in error["upstream_body"]["error"]["message"]
    assert "counters" in error  # the agent's counts so far still ride along


def test_an_upstream_that_is_down_stays_a_502(chain) -> None:
    assert run(chain, "down_model_agent", lookup_row()).status_code == 502
    assert run(chain, "gone_resources_agent", lookup_row()).status_code == 502
