"""Routes every resources server has (NeMo Gym 0.4.0 `nemo_gym/base_resources_server.py`), and reading a Responses output.

``POST /seed_session`` (``{}`` -> ``{}``), ``POST /verify`` (the run request plus ``response`` ->
the same plus ``reward`` in [0, 1]; missing ``responses_create_params`` or ``response`` -> 422),
``POST /aggregate_metrics`` (``{"verify_responses": [...]}`` -> ``{group_level_metrics,
agent_metrics, key_metrics}`` with ``mean/<field>``, ``max/``, ``min/``, ``median/``, ``std/`` of
every numeric top-level field, grouped by ``_ng_task_index``).
"""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict

TASK_INDEX = "_ng_task_index"


class VerifyRequest(BaseModel):
    """A run request (``responses_create_params`` and any row fields) plus the agent's ``response``."""

    model_config = ConfigDict(extra="allow")
    responses_create_params: dict[str, Any]
    response: dict[str, Any]


class AggregateRequest(BaseModel):
    """Body of ``/aggregate_metrics``."""

    verify_responses: list[dict[str, Any]]


def final_text(response: dict) -> str:
    """Text of the last assistant message in a Responses ``output`` ("" when there is none)."""
    for item in reversed(response.get("output") or []):
        if item.get("type") == "message" and item.get("role", "assistant") == "assistant":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
    return ""


def function_calls(response: dict) -> list[dict]:
    """The ``function_call`` items of a Responses ``output``."""
    return [item for item in response.get("output") or [] if item.get("type") == "function_call"]


def last_user_text(params: dict) -> str:
    """Text of the last user message of ``responses_create_params.input``."""
    items = params.get("input")
    if isinstance(items, str):
        return items
    for item in reversed(items or []):
        if item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
    return ""


def _stats(rows: list[dict]) -> dict[str, float]:
    fields = sorted(
        {
            k
            for row in rows
            for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not k.startswith("_ng_")
        }
    )
    out: dict[str, float] = {}
    for name in fields:
        values = [float(r[name]) for r in rows if isinstance(r.get(name), (int, float))]
        out.update(
            {
                f"mean/{name}": statistics.fmean(values),
                f"max/{name}": max(values),
                f"min/{name}": min(values),
                f"median/{name}": statistics.median(values),
                f"std/{name}": statistics.pstdev(values),
            }
        )
    return out


def aggregate(verify_responses: list[dict]) -> dict:
    """Aggregate metrics of verify responses (shape of Gym's ``AggregateMetrics``)."""
    if not verify_responses:
        return {"group_level_metrics": [], "agent_metrics": {}, "key_metrics": {}}
    groups: dict[Any, list[dict]] = {}
    for row in verify_responses:
        groups.setdefault(row.get(TASK_INDEX, 0), []).append(row)
    group_metrics = [
        {TASK_INDEX: index, **_stats(rows)} for index, rows in sorted(groups.items(), key=lambda g: str(g[0]))
    ]
    agent = _stats(verify_responses)
    return {
        "group_level_metrics": group_metrics,
        "agent_metrics": agent,
        "key_metrics": {k: v for k, v in agent.items() if k.startswith("mean/")},
    }


def add_resources_routes(app: FastAPI, verify: Callable[[VerifyRequest], Awaitable[dict]]) -> None:
    """Install ``/seed_session``, ``/verify`` (calling ``verify``) and ``/aggregate_metrics`` on ``app``."""

    @app.post("/seed_session")
    async def seed_session(body: dict[str, Any] | None = None) -> dict:
        return {}

    @app.post("/verify")
    async def verify_route(body: VerifyRequest) -> dict:
        result = await verify(body)
        reward = float(result["reward"])
        if not 0.0 <= reward <= 1.0:
            raise ValueError(f"reward {reward} is outside [0, 1]")
        return {**body.model_dump(), **result, "reward": reward}

    @app.post("/aggregate_metrics")
    async def aggregate_metrics(body: AggregateRequest) -> dict:
        return aggregate(body.verify_responses)
