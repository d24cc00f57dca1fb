"""Which failed rollouts a trainer retries as infrastructure and which are the row's data.

A trainer decides by the HTTP status of a failed ``/run`` (NeMo RL's driver: a status >= 500, 408
or 429 is infrastructure, retried up to ``max_attempts_per_prompt`` times; any other 4xx is the
row's data, retried up to ``max_data_attempts_per_prompt`` times; a dropped connection is
infrastructure). Every row error of ``/rollouts/run`` and the dry-run carries the status a direct
``/run`` would have answered, ``error.status``, so a trainer reading row errors in a 200 answer
(host mode) applies the same rule (docs/rollouts.md, "Failure classes": the table of every code,
which ``tests/test_docs.py`` holds to :data:`STATUS`).

Infrastructure: the row is fine and another attempt, later or on another replica, may succeed
(a server crashed, restarting or not placed yet, a node lost, the policy endpoint unreachable or
misconfigured, a deadline, an answer that breaks the contract). Data: what the row holds cannot be
run here (bad fields, an agent no server hosts, a prompt the endpoint refuses).
"""

from __future__ import annotations

from typing import Any

INFRASTRUCTURE, DATA = "infrastructure", "data"
RETRIABLE_4XX = frozenset({408, 429})

# code -> the HTTP status its row error stands for (GR-ROLLOUT-HTTP: the agent's own status;
# GR-ROLLOUT-EPISODE-FAILED: 422 when the environment server marked the failure terminal)
STATUS: dict[str, int] = {
    "GR-ROLLOUT-AGENT-REF": 422,
    "GR-ROLLOUT-ENVIRONMENT-SERVER": 422,
    "GR-ROLLOUT-NOT-RUNNING": 503,
    "GR-ROLLOUT-EPISODE-FAILED": 502,
    "GR-ROLLOUT-CONNECT": 502,
    "GR-ROLLOUT-HTTP": 502,
    "GR-ROLLOUT-BAD-JSON": 502,
    "GR-ROLLOUT-BAD-REWARD": 502,
    "GR-ROLLOUT-POLICY-UNAVAILABLE": 502,
    "GR-ROLLOUT-TOOL-PARSER": 502,
    "GR-ROLLOUT-TOKEN-IDS": 502,
    "GR-ROLLOUT-REASONING-FIELD": 502,
    "GR-ROLLOUT-DEADLINE": 504,
    "GR-ROLLOUT-NODE-LOST": 502,
    "GR-PLACE-NO-REPLICA": 503,
    "GR-ROLLOUT-BAD-REQUEST": 400,
    "GR-ROLLOUT-SHUTDOWN": 503,
    "GR-INTERNAL": 500,
}
TERMINAL_EPISODE_STATUS = 422


def failure_class(status: int) -> str:
    """:data:`INFRASTRUCTURE` for a status >= 500, 408 or 429, else :data:`DATA` (any other 4xx)."""
    return INFRASTRUCTURE if status >= 500 or status in RETRIABLE_4XX else DATA


def status_of(code: str) -> int:
    """The HTTP status a row error ``code`` stands for (500 for a code the table does not know)."""
    return STATUS.get(code, 500)


def with_status(answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` with ``error.status`` set when it is a row error without one (its code's status;
    a terminal ``GR-ROLLOUT-EPISODE-FAILED``, ``terminal: true`` beside the error, is 422); any
    other answer unchanged."""
    error = answer.get("error")
    if not isinstance(error, dict) or not isinstance(error.get("code"), str) or "status" in error:
        return answer
    code = error["code"]
    terminal = code == "GR-ROLLOUT-EPISODE-FAILED" and answer.get("terminal") is True
    return {**answer, "error": {**error, "status": TERMINAL_EPISODE_STATUS if terminal else status_of(code)}}
