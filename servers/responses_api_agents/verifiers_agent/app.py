"""``responses_api_agents/verifiers_agent``: runs a Prime Intellect ``verifiers`` environment per row.

Interface used (verifiers v0.1.14, as Gym's own verifiers_agent; verifiers v0.1.14 and NeMo Gym's `responses_api_agents/verifiers_agent/app.py`):
``vf.load_environment(env_id, **vf_env_args)`` and ``await env.run_group(group_inputs=[input],
client=..., model=..., sampling_args=..., state_columns=["trajectory"])`` -> ``[output]`` with
``completion``, ``reward``, ``metrics`` and ``trajectory[].tokens`` (``prompt_ids``,
``completion_ids``, ``completion_logprobs``). The client is an ``openai.AsyncOpenAI`` on the policy
model's ``/v1``, wrapped in ``verifiers.clients.NeMoRLChatCompletionsClient`` when that exists.
Unlike Gym (which loads lazily at the first rollout), the configured environment is loaded at
start: a missing ``verifiers`` or environment module fails the start, naming the module.
``POST /run`` (row: ``responses_create_params``, ``task_idx``, ``vf_env_id``, ``answer``, ``task``,
``example_id``, ``info``) -> ``{responses_create_params, response, reward}``;
``POST /v1/responses`` -> the response alone; ``GET /``. A rollout whose ``reward`` is not a
finite number (NaN, null, missing) is a 502 ``error.type: bad_reward`` naming the environment and
the value (``_kit/rewards.py``), never a silent 0.0. Tool calls are executed by the verifiers
environment itself (its own tool table), not by this agent.
Config keys: ``model_server`` (reference), ``model_name``, ``vf_env_id``, ``vf_env_args``,
``max_tokens`` (8192), ``temperature`` (1.0), ``top_p`` (1.0).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from _kit.config import Ref, StartupError  # noqa: E402
from _kit.peers import UpstreamError  # noqa: E402
from _kit.responses import message_to_items, text_of  # noqa: E402
from _kit.rewards import reward_problem, shown  # noqa: E402
from _kit.server import RowError, ServerContext, build_app, run_server  # noqa: E402
from pydantic import BaseModel, ConfigDict, Field  # noqa: E402


class VerifiersAgentConfig(BaseModel):
    """Instance config (Gym's ``VerifiersAgentConfig`` keys)."""

    model_config = ConfigDict(extra="allow")
    model_server: Ref
    model_name: str = ""
    vf_env_id: str = ""
    vf_env_args: dict[str, Any] = Field(default_factory=dict)
    max_tokens: int = 8192
    temperature: float = 1.0
    top_p: float = 1.0


class VerifiersRunRequest(BaseModel):
    """A verifiers dataset row (Gym's ``VerifiersAgentRunRequest``)."""

    model_config = ConfigDict(extra="allow")
    responses_create_params: dict[str, Any] = Field(default_factory=lambda: {"input": []})
    task_idx: int = 0
    vf_env_id: str | None = None
    answer: str = ""
    task: str = "default"
    example_id: int | str = 0
    info: dict[str, Any] = Field(default_factory=dict)


def module_of(env_id: str) -> str:
    """The importable module of an environment id, as verifiers derives it (``owner/ascii-tree`` -> ``ascii_tree``)."""
    return env_id.replace("-", "_").split("/")[-1]


def import_verifiers() -> Any:
    """``import verifiers``; a missing package is a :class:`StartupError` naming the module."""
    if importlib.util.find_spec("verifiers") is None:
        raise StartupError(
            "module 'verifiers' is not installed in this server's venv; vendor the verifiers "
            "wheel (and its dependencies) in the package's wheels/"
        )
    return importlib.import_module("verifiers")


def load_env(vf: Any, env_id: str, args: dict) -> Any:
    """Load one environment; a missing module or a failing ``load_environment`` is a :class:`StartupError`."""
    module = module_of(env_id)
    if importlib.util.find_spec(module) is None:
        raise StartupError(
            f"verifiers environment '{env_id}': module '{module}' is not installed in this "
            "server's venv; vendor its wheel in the package's wheels/ (vf_env_id must match it)"
        )
    try:
        return vf.load_environment(env_id, **args)
    except Exception as exc:  # noqa: BLE001 - any failure of user code at load is a start failure
        raise StartupError(
            f"verifiers environment '{env_id}' (module '{module}') failed to load: {type(exc).__name__}: {exc}"
        ) from exc


def _as_dict(message: Any) -> dict:
    if isinstance(message, dict):
        return message
    if hasattr(message, "model_dump"):
        return message.model_dump()
    return {k: getattr(message, k, None) for k in ("role", "content", "tool_calls", "tool_call_id")}


def _chat_tool_call(call: Any) -> dict:
    call = _as_dict(call) if not isinstance(call, str) else json.loads(call)
    function = call.get("function") or {}
    arguments = call.get("arguments") or function.get("arguments") or "{}"
    return {
        "id": call.get("id") or call.get("call_id") or "call_0",
        "type": "function",
        "function": {
            "name": call.get("name") or function.get("name", ""),
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }


def to_output(rollout: dict) -> list[dict]:
    """Responses output items of a rollout's ``completion``; token ids of each assistant turn come
    from ``trajectory[].tokens`` and ride on that turn's last item."""
    turn_tokens = []
    for step in rollout.get("trajectory") or []:
        tokens = step.get("tokens") if isinstance(step, dict) else None
        for message in (step.get("completion") or []) if isinstance(step, dict) else []:
            if _as_dict(message).get("role") == "assistant":
                turn_tokens.append(tokens)
    output: list[dict] = []
    turn = 0
    for raw in rollout.get("completion") or []:
        message = _as_dict(raw)
        role = message.get("role")
        if role == "assistant":
            tokens = turn_tokens[turn] if turn < len(turn_tokens) else None
            turn += 1
            chat = {
                "role": "assistant",
                "content": text_of(message.get("content")),
                "tool_calls": [_chat_tool_call(c) for c in message.get("tool_calls") or []],
            }
            if tokens:
                chat.update(
                    prompt_token_ids=list(tokens.get("prompt_ids") or []),
                    generation_token_ids=list(tokens.get("completion_ids") or []),
                    generation_log_probs=list(tokens.get("completion_logprobs") or []),
                )
            output.extend(message_to_items(chat, reasoning_parser=False, token_info=bool(tokens)))
        elif role == "tool":
            output.append(
                {
                    "type": "function_call_output",
                    "call_id": message.get("tool_call_id") or "call_0",
                    "output": text_of(message.get("content")),
                    "status": "completed",
                }
            )
        else:
            output.append({"type": "message", "role": role or "user", "content": text_of(message.get("content"))})
    return output


class VerifiersAgent:
    """Holds the loaded environments and the policy client."""

    def __init__(self, ctx: ServerContext) -> None:
        self.config = ctx.parse(VerifiersAgentConfig)
        self.vf = import_verifiers()
        self.envs: dict[str, Any] = {}
        if self.config.vf_env_id:
            self.envs[self.config.vf_env_id] = load_env(self.vf, self.config.vf_env_id, self.config.vf_env_args)
        model_url = ctx.peer(self.config.model_server.model_dump(), "responses_api_models")
        from openai import AsyncOpenAI

        client = AsyncOpenAI(base_url=f"{model_url}/v1", api_key="EMPTY")
        clients = (
            importlib.import_module("verifiers.clients") if importlib.util.find_spec("verifiers.clients") else None
        )
        wrapper = getattr(clients, "NeMoRLChatCompletionsClient", None)
        self.client = wrapper(client) if wrapper else client

    def env(self, env_id: str) -> Any:
        """The environment of ``env_id`` (the configured one was loaded at start); one this server
        cannot load is a :class:`RowError` (the row names it: 422)."""
        if env_id not in self.envs:
            try:
                self.envs[env_id] = load_env(self.vf, env_id, self.config.vf_env_args)
            except StartupError as exc:
                raise RowError(f"the row's vf_env_id: {exc}") from None
        return self.envs[env_id]

    async def respond(self, row: VerifiersRunRequest) -> dict:
        """Run one rollout of ``row``; returns Gym's ``VerifiersNeMoGymResponse`` shape."""
        env_id = row.vf_env_id or self.config.vf_env_id
        if not env_id:
            raise RowError("vf_env_id must be set on the row or in the agent config")
        params = row.responses_create_params
        items = params.get("input") or []
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise RowError("responses_create_params.input must be a string or a list of message objects")
        prompt = [{"role": i.get("role", "user"), "content": text_of(i.get("content"))} for i in items if "role" in i]
        rollout_input = {"prompt": prompt, "answer": row.answer, "info": row.info, "example_id": row.example_id}
        sampling = {
            "max_tokens": self.config.max_tokens,
            "temperature": params.get("temperature") or self.config.temperature,
            "top_p": params.get("top_p") or self.config.top_p,
        }
        outputs = await self.env(env_id).run_group(
            group_inputs=[rollout_input],
            client=self.client,
            model=self.config.model_name,
            sampling_args=sampling,
            state_columns=["trajectory"],
        )
        rollout = dict(outputs[0])
        problem = reward_problem(rollout)
        if problem is not None:
            raise UpstreamError(
                f"verifiers environment {env_id!r}",
                "run_group",
                f"returned an unusable reward: {problem}",
                body={"reward": shown(rollout.get("reward", "<missing>"))},
                kind="bad_reward",
            )
        return {
            "id": f"verifiers-{env_id}-{row.task_idx}",
            "object": "response",
            "created_at": 0,
            "model": self.config.model_name,
            "output": to_output(rollout),
            "env_id": env_id,
            "group_id": str(row.task_idx),
            "reward": float(rollout["reward"]),
            "metrics": rollout.get("metrics") or {},
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "status": "completed",
        }


def create_app(ctx: ServerContext):
    """The FastAPI app of this server."""
    agent = VerifiersAgent(ctx)
    app = build_app(ctx, "verifiers_agent")

    @app.post("/v1/responses")
    async def responses(body: VerifiersRunRequest) -> dict:
        return await agent.respond(body)

    @app.post("/run")
    async def run(body: VerifiersRunRequest) -> dict:
        response = await agent.respond(body)
        return {
            "responses_create_params": body.responses_create_params,
            "response": response,
            "reward": response["reward"],
        }

    return app


if __name__ == "__main__":
    run_server("responses_api_agents", create_app)
