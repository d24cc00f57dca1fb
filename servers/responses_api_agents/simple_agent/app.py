"""``responses_api_agents/simple_agent``: the tool-calling loop (docs/architecture.md §8), with the HTTP
contract of NeMo Gym 0.4.0 ``responses_api_agents/simple_agent/app.py``.

``POST /run``: ``/seed_session`` on the resources server -> model <-> tools loop -> ``/verify``;
returns the verify answer (the run request, ``response`` and ``reward``). ``POST /v1/responses``:
the loop alone. ``POST /aggregate_metrics``: proxied to the resources server. ``GET /``.
Loop: call the model's ``/v1/responses`` with ``input`` + outputs so far; stop on
``incomplete_details``, when an assistant message comes without function calls, after
``max_steps`` model calls (default :data:`DEFAULT_MAX_STEPS`: an episode is always bounded, case
C38) or after ``max_idle_turns`` model turns in a row with neither a message nor a function call
(a reasoning-only turn). A function call is executed only when ``_kit/tools.py`` allows it (a
tool the row offered, arguments a JSON object): then it goes to ``POST /<name>`` on the resources
server and the answer body (also an error status) is fed back as is; otherwise the refusal
(``{"error": "unknown tool ..."}`` / ``{"error": "Invalid tool call arguments ..."}``) is fed back
and nothing is sent. ``/run`` adds :data:`COUNTERS` to the verify answer: ``unknown_tool_calls``,
``invalid_tool_arguments``, ``context_overflow_stops`` (0 or 1: the model server ended the episode
because the prompt no longer fit, ``context_overflow`` on its reply), ``unparsed_tool_calls`` (tool
calls left as text in the final answer, ``_kit/markup.py``: the endpoint's parser missed them; the
rollout is still verified, and the first is said once on stderr; also each model reply the model
server marked ``unparsed_tool_calls``: a turn that ended on a tool call no parser extracted),
``max_steps_stops`` and
``idle_turn_stops`` (0 or 1: which cap ended the episode) and ``aborted_calls`` (model calls the
engine cut off and the model server asked again) and ``repaired_text`` (code points of the model's
output that were no text, replaced by U+FFFD: ``repaired_text`` of each model reply plus those in
executed tool arguments, ``_kit/text.py``). An error answer carries the counters so far as
``error.counters``. It answers 502 with ``error.type: bad_reward`` when the verify answer's
``reward`` is not a finite number (``_kit/rewards.py``). Cookies from each upstream are carried
along and set on the reply.
Config keys: ``resources_server`` and ``model_server`` (references ``{type, name}``),
``max_steps`` (null: :data:`DEFAULT_MAX_STEPS`), ``max_idle_turns`` (2), ``skip_verification``,
``skip_verification_reward``, ``resources_timeout_seconds`` (300: the read deadline of each call to
the resources server), ``model_timeout_seconds`` (1800: of each call to the model server, which
retries its endpoint for up to its own ``retry_deadline_seconds``), ``request_timeout_seconds``
(Gym's key: when set, the deadline of both unless the specific key is set too),
``max_tool_argument_bytes`` (1000000), ``connect_retry_seconds`` (30: a call to the model or
resources server whose connection is refused, e.g. while the daemon restarts it, is sent again
with backoff for up to this long; a call that was delivered is never sent twice,
``_kit/retry.py``), ``token_id_capture`` (false: NeMo Gym 0.7.0's key; with the config's
``token_id_capture.enabled``, or with ``token_id_capture.all_agents``, a row's model calls go under
``/ng-rollout/<rollout id>/training-token-capture/`` so the model server records their token ids;
the rollout id is the row's ``_ng_rollout_id``, else ``<_ng_task_index>-<_ng_rollout_index>``). A
``model_unavailable`` 502 of the model server (the policy endpoint stayed
down past its retry deadline) and its other named errors (``tool_parser_missing``,
``bad_token_ids``, ``reasoning_field_rejected``) are answered as such, so the row's error says so.
Rules and the contrast with Gym's own ``simple_agent``: docs/rollouts.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from _kit import rollout_path  # noqa: E402
from _kit.config import Ref  # noqa: E402
from _kit.markup import unparsed_tool_calls  # noqa: E402
from _kit.peers import CookieJar, Peers, UpstreamError  # noqa: E402
from _kit.resources import AggregateRequest, final_text  # noqa: E402
from _kit.retry import PEER_CONNECT, RetryRule  # noqa: E402
from _kit.rewards import reward_problem, shown  # noqa: E402
from _kit.server import ServerContext, build_app, run_server  # noqa: E402
from _kit.tools import INVALID, MAX_ARGUMENT_BYTES, UNKNOWN, check_call, offered_tools  # noqa: E402
from fastapi import Request, Response  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from pydantic import BaseModel, ConfigDict, Field, field_validator  # noqa: E402

COUNTERS = (
    "unknown_tool_calls",
    "invalid_tool_arguments",
    "context_overflow_stops",
    "unparsed_tool_calls",
    "max_steps_stops",
    "idle_turn_stops",
    "aborted_calls",
    "repaired_text",
)
DEFAULT_MAX_STEPS = 32
UNPARSED_WARNING = (
    "WARNING: the policy emitted tool calls that the endpoint's parser did not parse (tool-call "
    "markup in a final answer, or a turn that ended on a tool call with none parsed; counted as "
    "unparsed_tool_calls); check vLLM's --tool-call-parser"
)


class SimpleAgentConfig(BaseModel):
    """Instance config (module doc)."""

    model_config = ConfigDict(extra="allow")
    resources_server: Ref
    model_server: Ref
    max_steps: int | None = Field(None, ge=1)
    max_idle_turns: int = Field(2, ge=1)
    skip_verification: bool = False
    skip_verification_reward: float = 0.0
    request_timeout_seconds: float | None = Field(None, gt=0)
    resources_timeout_seconds: float | None = Field(300.0, gt=0)
    model_timeout_seconds: float | None = Field(1800.0, gt=0)
    max_tool_argument_bytes: int = MAX_ARGUMENT_BYTES
    connect_retry_seconds: float = Field(PEER_CONNECT.deadline_s, ge=0)
    token_id_capture: bool = False

    def deadline(self, key: str) -> float | None:
        """The read deadline (s) of calls governed by ``key``: that key when it was set, else
        ``request_timeout_seconds`` when that was set, else the key's default."""
        if key in self.model_fields_set or self.request_timeout_seconds is None:
            return getattr(self, key)
        return self.request_timeout_seconds


class RunRequest(BaseModel):
    """A dataset row: ``responses_create_params`` plus any other fields (forwarded as is). Its
    ``input`` must be a string or a list and its ``tools`` a list (or absent): else FastAPI answers
    422, the row's data (docs/rollouts.md, "Failure classes"), not a 500 from inside the loop."""

    model_config = ConfigDict(extra="allow")
    responses_create_params: dict[str, Any]

    @field_validator("responses_create_params")
    @classmethod
    def _readable(cls, params: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(params.get("input", []), (str, list)):
            raise ValueError(f"input must be a string or a list of items, not {type(params['input']).__name__}")
        if not isinstance(params.get("tools") or [], list):
            raise ValueError(f"tools must be a list, not {type(params['tools']).__name__}")
        return params


class SimpleAgent:
    """The loop; ``model_url`` and ``resources_url`` are resolved from the references at start."""

    def __init__(self, ctx: ServerContext) -> None:
        self.config = ctx.parse(SimpleAgentConfig)
        self.model_name = self.config.model_server.name
        self.resources_name = self.config.resources_server.name
        self.model_url = ctx.peer(self.config.model_server.model_dump(), "responses_api_models")
        self.resources_url = ctx.peer(self.config.resources_server.model_dump(), "resources_servers")
        self.peers = Peers(None, retry=RetryRule(self.config.connect_retry_seconds))
        self.max_steps = self.config.max_steps or DEFAULT_MAX_STEPS
        self.capture = rollout_path.capture_enabled(
            OmegaConf.to_container(ctx.global_config, resolve=True), self.config.token_id_capture
        )
        self.warned_unparsed = False
        key = "resources_timeout_seconds"
        self.to_resources = {"role": "resources server", "timeout": self.config.deadline(key), "deadline_name": key}
        key = "model_timeout_seconds"
        self.to_model = {"role": "model server", "timeout": self.config.deadline(key), "deadline_name": key}

    async def tool(self, item: dict, offered: list[str], jar: CookieJar, counts: dict[str, int]) -> dict:
        """The ``function_call_output`` item for one function call (executed only when allowed)."""
        call = check_call(item, offered, self.config.max_tool_argument_bytes)
        counts["repaired_text"] += call.repaired_text
        if call.kind == UNKNOWN:
            counts["unknown_tool_calls"] += 1
        elif call.kind == INVALID:
            counts["invalid_tool_arguments"] += 1
        output = call.refusal
        if output is None:
            response = await self.peers.post(
                self.resources_name,
                f"{self.resources_url}/{call.name}",
                call.arguments,
                jar,
                check=False,
                **self.to_resources,
            )
            output = response.text
        return {"type": "function_call_output", "call_id": call.call_id, "output": output}

    async def model_turn(self, body: dict, jar: CookieJar, counts: dict[str, int], prefix: str = "") -> dict:
        """One call of the model server's ``/v1/responses`` (under the rollout ``prefix``): the
        Responses object (checked for shape); the calls its endpoint cut off are added to
        ``aborted_calls``, also when it gave up."""
        url = f"{self.model_url}{prefix}/v1/responses"
        try:
            reply = await self.peers.json(self.model_name, url, body, jar, **self.to_model)
        except UpstreamError as exc:
            error = exc.body.get("error") if isinstance(exc.body, dict) else None
            counts["aborted_calls"] += _count(error.get("aborted_calls") if isinstance(error, dict) else None)
            raise
        if not isinstance(reply, dict) or not isinstance(reply.get("output"), list):
            raise UpstreamError(
                self.model_name,
                url,
                f"answered a body that is not a Responses object: {json.dumps(reply)[:300]}",
                role="model server",
            )
        counts["aborted_calls"] += _count(reply.get("aborted_calls"))
        counts["repaired_text"] += _count(reply.get("repaired_text"))  # the model server replaced no-text code points
        unparsed = _count(reply.get("unparsed_tool_calls"))  # the model server saw an unparsed call
        if unparsed:
            counts["unparsed_tool_calls"] += unparsed
            self.warn_unparsed()
        return reply

    async def episode(
        self,
        params: dict,
        resources: CookieJar,
        model: CookieJar,
        counts: dict[str, int] | None = None,
        prefix: str = "",
    ) -> tuple[dict, dict[str, int]]:
        """Run the model <-> tools loop; returns the last model response with every output
        appended, and the counters (:data:`COUNTERS`, kept in ``counts`` when given). ``prefix``:
        the rollout path the model calls go under (``_kit/rollout_path.py``)."""
        base_input = params.get("input", [])
        if isinstance(base_input, str):
            base_input = [{"type": "message", "role": "user", "content": base_input}]
        offered = offered_tools(params)
        counts = counts if counts is not None else dict.fromkeys(COUNTERS, 0)
        outputs: list[dict] = []
        usage: dict[str, Any] | None = None
        step = idle = 0
        while True:
            step += 1
            reply = await self.model_turn({**params, "input": base_input + outputs}, model, counts, prefix)
            outputs.extend(reply["output"])
            usage = _add_usage(usage, reply.get("usage"))
            if reply.get("context_overflow"):
                counts["context_overflow_stops"] = 1
            if reply.get("incomplete_details"):
                break
            calls = [o for o in reply["output"] if isinstance(o, dict) and o.get("type") == "function_call"]
            said = any(
                isinstance(o, dict) and o.get("type") == "message" and o.get("role") == "assistant"
                for o in reply["output"]
            )
            if not calls and said:
                self.count_unparsed(reply, offered, counts)
                break
            idle = 0 if calls else idle + 1
            if idle >= self.config.max_idle_turns:  # reasoning only (or nothing), turn after turn
                counts["idle_turn_stops"] = 1
                break
            for call in calls:
                outputs.append(await self.tool(call, offered, resources, counts))
            if step >= self.max_steps:
                counts["max_steps_stops"] = 1
                break
        return {**reply, "output": outputs, "usage": usage}, counts

    def count_unparsed(self, reply: dict, offered: list[str], counts: dict[str, int]) -> None:
        """Count tool-call markup left in the final answer (``_kit/markup.py``); said once per process."""
        found = unparsed_tool_calls(final_text(reply), offered)
        counts["unparsed_tool_calls"] += found
        if found:
            self.warn_unparsed()

    def warn_unparsed(self) -> None:
        if not self.warned_unparsed:
            self.warned_unparsed = True
            print(UNPARSED_WARNING, file=sys.stderr, flush=True)

    async def run(self, body: RunRequest, cookies: dict[str, str]) -> tuple[dict, CookieJar, CookieJar]:
        """seed_session -> episode -> verify; returns the verify answer (plus the counters) and the
        cookie jars. Raises :class:`UpstreamError` (``bad_reward``) for an unusable reward, and
        every :class:`UpstreamError` with the counters so far (``error.counters``)."""
        resources, model = CookieJar(cookies), CookieJar(cookies)
        row = body.model_dump()
        counts = dict.fromkeys(COUNTERS, 0)
        try:
            await self.peers.post(
                self.resources_name, f"{self.resources_url}/seed_session", row, resources, **self.to_resources
            )
            rollout_id = rollout_path.row_rollout_id(row) if self.capture else None
            response, _ = await self.episode(
                body.responses_create_params,
                resources,
                model,
                counts,
                rollout_path.prefix(rollout_id, token_capture=True),
            )
            if self.config.skip_verification:
                return (
                    {
                        **row,
                        "response": response,
                        "reward": float(self.config.skip_verification_reward),
                        "verification_skipped": True,
                        **counts,
                    },
                    resources,
                    model,
                )
            url = f"{self.resources_url}/verify"
            verified = await self.peers.json(
                self.resources_name, url, {**row, "response": response}, resources, **self.to_resources
            )
            problem = reward_problem(verified)
            if problem is not None:
                value = verified.get("reward", "<missing>") if isinstance(verified, dict) else verified
                raise UpstreamError(
                    self.resources_name,
                    url,
                    f"answered /verify with an unusable reward: {problem}",
                    body={"reward": shown(value)},
                    kind="bad_reward",
                    role="resources server",
                )
        except UpstreamError as exc:
            exc.extra["counters"] = counts
            raise
        return {**verified, **counts}, resources, model


def _count(value: Any) -> int:
    """A count an upstream reported (0 unless a non-negative int)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _add_usage(total: dict | None, usage: dict | None) -> dict | None:
    if not usage:
        return total
    if not total:
        return json.loads(json.dumps(usage))
    out = dict(total)
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        out[key] = (out.get(key) or 0) + (usage.get(key) or 0)
    for group, field in (("input_tokens_details", "cached_tokens"), ("output_tokens_details", "reasoning_tokens")):
        out[group] = {field: ((out.get(group) or {}).get(field) or 0) + ((usage.get(group) or {}).get(field) or 0)}
    return out


def _set_cookies(response: Response, *jars: CookieJar) -> None:
    for jar in jars:
        for name, value in jar.values.items():
            response.set_cookie(name, value)


def create_app(ctx: ServerContext):
    """The FastAPI app of this server."""
    agent = SimpleAgent(ctx)
    app = build_app(ctx, "simple_agent")

    @app.post("/run")
    async def run(body: RunRequest, request: Request, response: Response) -> dict:
        result, resources, model = await agent.run(body, dict(request.cookies))
        _set_cookies(response, resources, model)
        return result

    @app.post("/v1/responses")
    async def responses(body: dict[str, Any], request: Request, response: Response) -> dict:
        resources, model = CookieJar(dict(request.cookies)), CookieJar(dict(request.cookies))
        prefix = rollout_path.prefix(request.state.rollout_id, request.state.token_capture)
        result, _ = await agent.episode(body, resources, model, prefix=prefix)
        _set_cookies(response, resources, model)
        return result

    @app.post("/aggregate_metrics")
    async def aggregate_metrics(body: AggregateRequest) -> dict:
        return await agent.peers.json(
            agent.resources_name, f"{agent.resources_url}/aggregate_metrics", body.model_dump(), **agent.to_resources
        )

    return app


if __name__ == "__main__":
    run_server("responses_api_agents", create_app)
