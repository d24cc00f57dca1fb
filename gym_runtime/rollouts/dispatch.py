"""Send dataset rows to their servers' ``/run`` with bounded concurrency (head ``/rollouts/run``, dry-run).

A row names its agent with ``agent_ref: {type: responses_api_agents, name: <instance>}`` (docs/architecture.md
§9); the whole row is POSTed as JSON to ``<agent url>/run``, as Gym's rollout collection does. Under
a Gym release line with environment servers the row goes to the environment server fronting its
agent instead, and a materialized task as an episode request (:mod:`gym_runtime.rollouts.routing`,
:mod:`gym_runtime.rollouts.tasks`; ``GR-ROLLOUT-ENVIRONMENT-SERVER``: no environment server can take
the row, ``GR-ROLLOUT-EPISODE-FAILED``: the environment server answered a handled failure).
Results keep the row's index; a row that fails gets ``{"error": {"code", "message", "status"}}``
(``status``: the HTTP status a direct ``/run`` would have answered,
:mod:`gym_runtime.rollouts.failure_class`) instead of stopping the batch. Each row's agent replica is learnt from the answer
(:mod:`gym_runtime.rollouts.spread`), for the per-replica counts. Codes: ``GR-ROLLOUT-AGENT-REF``
(no agent, or one not configured), ``GR-ROLLOUT-NOT-RUNNING`` (configured, no address now), ``GR-ROLLOUT-HTTP`` (the agent answered an error status),
``GR-ROLLOUT-CONNECT`` (no answer), ``GR-ROLLOUT-BAD-JSON``, ``GR-ROLLOUT-BAD-REWARD`` (the reward
is not a finite number: NaN, null, a string, missing; from the answer itself, or the built-in
agents' 502 ``error.type: bad_reward``; see :mod:`gym_runtime.rollouts.verdict`),
``GR-ROLLOUT-POLICY-UNAVAILABLE`` (the built-in agents' 502 ``error.type: model_unavailable``: the
policy endpoint stayed unreachable, or kept aborting the completion, past the model server's retry
deadline, docs/reliability.md), ``GR-ROLLOUT-TOOL-PARSER`` (``tool_parser_missing``: the endpoint
refuses requests with tools for want of vLLM's tool flags), ``GR-ROLLOUT-TOKEN-IDS``
(``bad_token_ids``: the endpoint returned no token ids), ``GR-ROLLOUT-REASONING-FIELD``
(``reasoning_field_rejected``: the endpoint refused how reasoning was sent back),
``GR-ROLLOUT-DEADLINE`` (the batch deadline, or the rollout's own ``timeout_s``, passed first);
an error answer's message is the agent's own ``error.message`` (which carries each upstream's
words, ``servers/_kit/peers.py``), up to :data:`MAX_MESSAGE` characters, and the counters the agent
reports with it (``error.counters``) are kept beside the row's error; strings of an answer that are
no text (a lone surrogate, NUL, control characters: model output an agent passed on) are replaced
by U+FFFD and added to the row's ``repaired_text`` (``servers/_kit/text.py``);
with placement ``ray``, the agent's stable address itself may answer ``GR-ROLLOUT-NODE-LOST``
(the node running the agent's replica was lost while it answered, naming the node, the instance
and the replica) or ``GR-PLACE-NO-REPLICA`` (no replica ran in time): the row keeps that code and
message (:mod:`gym_runtime.placement.router`, docs/scale-out.md "Node loss").

No row is retried here: a rollout is not idempotent (``/seed_session``, tool calls), and the
retries that are safe happen where the request is known not to have been processed (the built-in
servers' calls, ``servers/_kit/retry.py``) or where the agent declared its ``/run`` safe to
repeat after a node's loss (its stable address sends it once more). A batch that is cancelled (its client disconnected,
the daemon stops) cancels every row still running, which closes their connections to the agents.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from gym_runtime.rollouts.failure_class import status_of, with_status
from gym_runtime.rollouts.routing import Route, RouteError, Routing
from gym_runtime.rollouts.spread import REPLICA_HEADER, served_by
from gym_runtime.rollouts.tasks import (
    ENVIRONMENT_SERVER_STAMP,
    EPISODE_FAILED,
    RESULT_TYPE_STAMP,
    episode_record,
    episode_request,
    with_indexes,
)
from gym_runtime.rollouts.verdict import BAD_REWARD, COUNTERS, AgentFacts, bad_reward
from servers._kit.text import repaired

AGENT_TYPE = "responses_api_agents"
POLICY_UNAVAILABLE = "GR-ROLLOUT-POLICY-UNAVAILABLE"
# error.type of a built-in agent's 502 -> the row's code
AGENT_ERROR_CODES = {
    "bad_reward": BAD_REWARD,
    "model_unavailable": POLICY_UNAVAILABLE,
    "tool_parser_missing": "GR-ROLLOUT-TOOL-PARSER",
    "bad_token_ids": "GR-ROLLOUT-TOKEN-IDS",
    "reasoning_field_rejected": "GR-ROLLOUT-REASONING-FIELD",
}
# error.code of a stable address's own answer (placement ray), kept as the row's code
PLACEMENT_CODES = frozenset({"GR-ROLLOUT-NODE-LOST", "GR-PLACE-NO-REPLICA"})
MAX_MESSAGE = 8000


def row_error(code: str, message: str, status: int | None = None) -> dict[str, Any]:
    """The per-row error shape ``{"error": {"code", "message", "status"}}``: ``status`` is the HTTP
    status a direct ``/run`` would have answered (default: the code's,
    :mod:`gym_runtime.rollouts.failure_class`), by which a trainer tells infrastructure from data."""
    return {"error": {"code": code, "message": message, "status": status or status_of(code)}}


def agent_name(row: Any) -> str | None:
    """The agent instance a row names, or None when ``agent_ref`` is missing or malformed."""
    ref = row.get("agent_ref") if isinstance(row, dict) else None
    if isinstance(ref, dict) and ref.get("type", AGENT_TYPE) == AGENT_TYPE and isinstance(ref.get("name"), str):
        return ref["name"]
    return None


def _agent_error(body: Any) -> dict[str, Any]:
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


@dataclass(frozen=True)
class Reply:
    """What :func:`run_row` got: ``answer`` (the agent's JSON object, or a row error), ``agent``
    (the running agent the row went to, None when it named none) and ``replica`` (the agent's
    replica that served it, :func:`gym_runtime.rollouts.spread.served_by`; None when unknown)."""

    answer: dict[str, Any]
    agent: str | None = None
    replica: str | None = None


async def run_row(
    client: httpx.AsyncClient,
    agents: Mapping[str, str | None],
    row: Any,
    timeout_s: float | None = None,
    facts: Mapping[str, AgentFacts] | None = None,
    replicas: Mapping[str, Mapping[str, Any]] | None = None,
    **where: Any,
) -> Reply:
    """POST one row to its server's ``/run`` (:func:`_run_row`, which documents the arguments); a
    :class:`Reply` (never raises) whose row error, if any, carries ``error.status``
    (:func:`gym_runtime.rollouts.failure_class.with_status`)."""
    reply = await _run_row(client, agents, row, timeout_s, facts, replicas, **where)
    return Reply(with_status(reply.answer), reply.agent, reply.replica)


async def _run_row(
    client: httpx.AsyncClient,
    agents: Mapping[str, str | None],
    row: Any,
    timeout_s: float | None = None,
    facts: Mapping[str, AgentFacts] | None = None,
    replicas: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    routing: Routing | None = None,
    route: Route | None = None,
    index: int = 0,
    sample: int = 0,
) -> Reply:
    """POST one row to its server's ``/run``; a :class:`Reply` (never raises). ``agents`` maps the
    servers rows may go to (agents, and environment servers) to base URLs, None for one that has
    no address now (starting, restarting, being placed: ``GR-ROLLOUT-NOT-RUNNING``); ``facts``
    (agent -> :class:`AgentFacts`) lets a bad-reward error name the resources server; ``replicas``
    (agent -> {replica: node}) says which replicas may have served it (default: the agent alone).

    Without ``routing`` (and ``route``) the row goes to the agent its ``agent_ref`` names. With them
    it goes where :meth:`Routing.route` says (``route``: already decided, e.g. by the dataset check),
    a materialized task as an episode request (``index``, ``sample``: its default task and rollout
    index, :func:`gym_runtime.rollouts.tasks.episode_request`; a flat row gets them as its
    ``_ng_task_index`` / ``_ng_rollout_index`` where it has none,
    :func:`gym_runtime.rollouts.tasks.with_indexes`), and an answer that came through an
    environment server is stamped ``_ng_environment_server`` / ``_ng_result_type`` as Gym's
    collector stamps its records."""
    if route is None and routing is None:
        name = agent_name(row)
        if name is None:
            return Reply(
                row_error("GR-ROLLOUT-AGENT-REF", "row has no agent_ref {type: responses_api_agents, name: ...}")
            )
        route = Route(name, name)
    elif route is None:
        assert routing is not None  # the branch above took the row without routing
        if not isinstance(row, dict):
            return Reply(row_error("GR-ROLLOUT-AGENT-REF", "the row is not a JSON object, so it names no agent"))
        try:
            route = routing.route(row)
        except RouteError as e:
            code = "GR-ROLLOUT-ENVIRONMENT-SERVER" if e.kind == "environment" else "GR-ROLLOUT-AGENT-REF"
            return Reply(row_error(code, e.message + (f" ({e.hint})" if e.hint else "")))
    base = agents.get(route.server)
    kind = "environment server" if route.environment_server else "agent"
    if base is None and route.server in agents:
        return Reply(
            row_error(
                "GR-ROLLOUT-NOT-RUNNING",
                f"the row goes to {kind} {route.server!r}, which has no address now (starting, restarting or "
                "being placed); send the row again once it runs",
            ),
            route.agent,
        )
    if base is None:
        known = ", ".join(sorted(agents)) or "(none)"
        code = "GR-ROLLOUT-ENVIRONMENT-SERVER" if route.environment_server else "GR-ROLLOUT-AGENT-REF"
        return Reply(
            row_error(code, f"the row goes to {kind} {route.server!r}, which is not configured (servers: {known})")
        )
    url = base.rstrip("/") + "/run"
    body = (
        episode_request(row, index, sample)
        if route.episode
        else {**row, "agent_ref": {"name": route.agent_ref}}
        if route.agent_ref
        else row
    )
    if route.environment_server is not None and not route.episode:
        body = with_indexes(body, index, sample)
    try:
        r = await client.post(url, json=body, timeout=timeout_s)
    except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
        return Reply(
            row_error(
                "GR-ROLLOUT-DEADLINE",
                f"{route.server}: POST {url} did not answer within the rollout deadline of {timeout_s:g}s",
            ),
            route.agent,
        )
    except httpx.HTTPError as e:
        return Reply(
            row_error("GR-ROLLOUT-CONNECT", f"{route.server}: POST {url} failed: {type(e).__name__}: {e}"), route.agent
        )
    answer = _judge(route, url, r, (facts or {}).get(route.agent))
    if route.environment_server is not None and (answer.get("error") or {}).get("code") in (None, EPISODE_FAILED):
        answer = {**answer, ENVIRONMENT_SERVER_STAMP: route.environment_server, RESULT_TYPE_STAMP: route.result_type}
    return Reply(answer, route.agent, served_by(route.agent, r.headers.get(REPLICA_HEADER), replicas or {}))


def _counters(error: dict[str, Any]) -> dict[str, int]:
    """The counters an agent's error answer reports (``error.counters``; known names, counts only)."""
    found = error.get("counters")
    if not isinstance(found, dict):
        return {}
    return {
        k: v for k, v in found.items() if k in COUNTERS and isinstance(v, int) and not isinstance(v, bool) and v >= 0
    }


def _judge(route: Route, url: str, r: httpx.Response, fact: AgentFacts | None) -> dict[str, Any]:
    """The server's answer ``r`` as the row's result: its JSON object (an episode answer as its
    record) or a row error."""
    name = route.server
    try:
        body, fixed = repaired(r.json())  # text whatever the agent relayed (servers/_kit/text.py)
    except (ValueError, RecursionError):  # not JSON, a number over 4300 digits, nested past the parser's depth
        body, fixed = None, 0
    if r.status_code >= 400:
        error = _agent_error(body)
        if error.get("code") in PLACEMENT_CODES:  # the router's own message already names the instance
            return row_error(error["code"], str(error.get("message"))[:MAX_MESSAGE], r.status_code)
        code = AGENT_ERROR_CODES.get(error.get("type"))  # type: ignore[arg-type]  # a type that is not a string is simply not found
        said = str(error["message"]) if error.get("message") is not None else repaired(r.text)[0]
        if code is not None:  # a built-in agent's own typed error: named by the agent, relayed or not
            return {**row_error(code, f"{route.agent}: {said[:MAX_MESSAGE]}", r.status_code), **_counters(error)}
        return {
            **row_error(
                "GR-ROLLOUT-HTTP", f"{name}: POST {url} answered {r.status_code}: {said[:MAX_MESSAGE]}", r.status_code
            ),
            **_counters(error),
        }
    if body is None:
        return row_error("GR-ROLLOUT-BAD-JSON", f"{name}: POST {url} answered non-JSON: {r.text[:200]!r}")
    if route.episode:
        body = episode_record(name, body)
        if isinstance(body.get("error"), dict):
            return body
    if not isinstance(body, dict):
        body = {"result": body}
    if fixed:  # no-text code points the agent passed on: counted with those it repaired itself
        own = body.get("repaired_text")
        body["repaired_text"] = fixed + (own if isinstance(own, int) and not isinstance(own, bool) and own > 0 else 0)
    unusable = bad_reward(body, route.agent, fact)
    return {"error": unusable} if unusable is not None else body


@dataclass(frozen=True)
class Batch:
    """The outcome of :func:`run_rows`: ``results[i]`` belongs to row ``i`` (the agent's answer or a
    row error), ``latency_s[i]`` is that row's wall time in seconds from the moment it was sent
    (``None`` for a row that never started), ``agents[i]`` / ``replicas[i]`` the running agent and
    the replica that served it (None: none / unknown), ``wall_s`` the batch's wall time (s)."""

    results: list[dict[str, Any]]
    latency_s: list[float | None]
    agents: list[str | None]
    replicas: list[str | None]
    wall_s: float


async def run_rows(
    rows: list[Any],
    agents: Mapping[str, str | None] | Callable[[], Mapping[str, str | None]],
    *,
    concurrency: int = 32,
    deadline_s: float | None = None,
    client: httpx.AsyncClient | None = None,
    facts: Mapping[str, AgentFacts] | None = None,
    results: list[dict[str, Any] | None] | None = None,
    replicas: Mapping[str, Mapping[str, Any]] | None = None,
    routing: Routing | None = None,
) -> Batch:
    """Run every row (at most ``concurrency`` at once); see :class:`Batch`.

    ``agents`` maps the servers rows may go to (agents; with ``routing``, environment servers too)
    to base URLs (``http://host:port``); ``replicas`` maps agents to ``{replica: node}``;
    ``routing``: where each row goes (:func:`run_row`; row ``i`` is task ``i``, rollout 0, for a
    materialized task without stamps). ``deadline_s`` bounds
    the whole batch: rows still running then are cancelled and get ``GR-ROLLOUT-DEADLINE``.
    ``results`` (a list of ``len(rows)`` Nones) receives each row's result as soon as it is there,
    so a caller that cancels the batch still has the rows already finished (the head server at
    shutdown). Cancelling the call cancels every row still running (their connections are closed)
    before the cancellation propagates.
    """
    table = agents() if callable(agents) else agents
    sem = asyncio.Semaphore(max(1, concurrency))
    results = results if results is not None else [None] * len(rows)
    latency: list[float | None] = [None] * len(rows)
    names: list[str | None] = [None] * len(rows)
    served: list[str | None] = [None] * len(rows)
    own = client is None
    http = client or httpx.AsyncClient(
        trust_env=False, timeout=None, limits=httpx.Limits(max_connections=max(concurrency, 10))
    )

    async def one(i: int, row: Any) -> None:
        async with sem:
            t0 = time.monotonic()
            try:
                reply = await run_row(http, table, row, facts=facts, replicas=replicas, routing=routing, index=i)
                results[i], names[i], served[i] = reply.answer, reply.agent, reply.replica
            except Exception as e:  # noqa: BLE001 - a bug here must cost one row, never the batch
                results[i] = row_error(
                    "GR-INTERNAL",
                    f"the row could not be dispatched: {type(e).__name__}: {e} "
                    "(a bug in gym-runtime: please report it)",
                )
            finally:
                latency[i] = round(time.monotonic() - t0, 4)

    started = time.monotonic()
    tasks = [asyncio.create_task(one(i, row)) for i, row in enumerate(rows)]
    try:
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=deadline_s)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
    finally:
        for t in tasks:  # cancelled from outside (client gone, daemon stopping): no row may outlive the batch
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if own:
            await http.aclose()
    return Batch(
        [
            r
            if r is not None
            else row_error(
                "GR-ROLLOUT-DEADLINE", f"the batch deadline of {deadline_s:g}s passed before this row finished"
            )
            for r in results
        ],
        latency,
        names,
        served,
        round(time.monotonic() - started, 4),
    )
