"""``responses_api_models/vllm_model``: the policy model server (docs/architecture.md §8; NeMo Gym 0.4.0
``responses_api_models/vllm_model/app.py``).

Endpoints: ``POST /v1/responses`` (Responses API -> upstream ``/chat/completions`` -> Responses),
``POST /v1/chat/completions`` (pass-through with the same pre/post-processing), ``GET /``.
Config keys: ``base_url`` (string or list of replicas; a session sticks to one replica by
sha256(session id) % n), ``api_key``, ``model``, ``return_token_id_information``,
``uses_reasoning_parser``, ``request_prompt_and_generation_token_ids``, ``sampling_overrides``,
``extra_body``, ``chat_template_kwargs``, ``replace_developer_role_with_system``,
``request_timeout_seconds``, ``retry_deadline_seconds`` (600), ``reasoning_field`` (``both``).
Retries (``_kit/retry.py``, docs/reliability.md): a chat completion or tokenize call whose
connection is refused or lost, or that is answered 429/502/503/504, is sent again with backoff
until ``retry_deadline_seconds`` after the first attempt (a vLLM restarting during a weight refit);
past it the answer is HTTP 502 ``error.type: model_unavailable`` naming the endpoint, the time
waited and the last failure.
An upstream error that says the prompt no longer fits (every wording of ``_kit/overflow.py``)
becomes an empty completion with ``finish_reason: length`` (Gym's behaviour) that also carries
``context_overflow: {wording, upstream_status, message}`` (on the Responses object too), so agents
and reports count such stops apart from failures; any other upstream failure is HTTP 502 naming
the upstream URL. Reasoning: with ``uses_reasoning_parser`` the upstream's ``reasoning_content`` /
``reasoning`` and ``<think>`` tags in the content (``_kit/reasoning.py``) become ``reasoning``
items; without it the content passes unchanged and upstream reasoning fields are a 502 saying
which setting to change. ``reasoning_field`` (``both`` | ``reasoning`` | ``reasoning_content``,
default ``both``, as NeMo Gym 0.7.0 ``responses_api_models/vllm_model/app.py``) says under which
key(s) an outgoing assistant message carries its reasoning; an endpoint refusing that (400 about
``reasoning``) is a 502 ``reasoning_field_rejected`` naming the setting. A request with tools
refused for want of vLLM's ``--enable-auto-tool-choice --tool-call-parser`` is a 502
``tool_parser_missing`` naming the flags. A completion the engine cut off (``finish_reason:
abort`` or any unknown reason, ``_kit/policy_answers.py``) is asked again under the same retry
deadline (the answer then carries ``aborted_calls``), and past it is a 502 ``model_unavailable``
carrying ``aborted_calls``: it never reaches an agent as an answer. With token information on,
every logprob token must be ``token_id:<int>``, else a 502 ``bad_token_ids``. Every 502 message
carries the upstream's own words. Rules: docs/rollouts.md.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import sys
import time
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fastapi import Request  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402
from pydantic import BaseModel, ConfigDict, Field, field_validator  # noqa: E402

from _kit.config import StartupError  # noqa: E402
from _kit.overflow import classify, message_of  # noqa: E402
from _kit.peers import Peers, UpstreamError, words_of  # noqa: E402
from _kit.policy_answers import TokenIdsError, explain, interrupted, prompt_ids, token_ids  # noqa: E402
from _kit.reasoning import split_think  # noqa: E402
from _kit.retry import RetryRule  # noqa: E402
from _kit.responses import TOKEN_FIELDS, to_chat_request, to_response  # noqa: E402
from _kit.server import ServerContext, build_app, error_body, run_server  # noqa: E402


# reasoning_field -> the keys an outgoing assistant message carries its reasoning under
REASONING_KEYS = {"both": ("reasoning_content", "reasoning"), "reasoning": ("reasoning",),
                  "reasoning_content": ("reasoning_content",)}


class VLLMModelConfig(BaseModel):
    """The instance config (Gym's ``VLLMModelConfig`` keys that matter here; others are allowed)."""

    model_config = ConfigDict(extra="allow")
    base_url: list[str]
    api_key: str = "EMPTY"
    model: str
    return_token_id_information: bool = False
    uses_reasoning_parser: bool = False
    request_prompt_and_generation_token_ids: bool = False
    replace_developer_role_with_system: bool = False
    sampling_overrides: dict[str, Any] | None = None
    extra_body: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    request_timeout_seconds: float | None = None
    retry_deadline_seconds: float = Field(600.0, ge=0)
    reasoning_field: Literal["both", "reasoning", "reasoning_content"] = "both"

    @field_validator("base_url", mode="before")
    @classmethod
    def _as_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


def _is_context_length_error(status: int | None, body: Any) -> bool:
    """True when an upstream error answer says the prompt does not fit (``_kit/overflow.py``)."""
    return classify(status, body) is not None


class VLLMModel:
    """Talks to the upstream replicas; one instance per server process."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.config = ctx.parse(VLLMModelConfig)
        if not self.config.base_url:
            raise StartupError(f"'{ctx.name}': base_url is empty (set policy_base_url)")
        self.replicas = [url.rstrip("/") for url in self.config.base_url]
        self.peers = Peers(self.config.request_timeout_seconds,
                           headers={"authorization": f"Bearer {self.config.api_key}"},
                           retry=RetryRule(self.config.retry_deadline_seconds, idempotent=True),
                           gave_up="model_unavailable")

    def replica(self, session_id: str) -> str:
        """The replica base URL of a session (stable: sha256 of the session id modulo n)."""
        digest = hashlib.sha256(session_id.encode()).digest()
        return self.replicas[int.from_bytes(digest[:8], "big") % len(self.replicas)]

    def prepare(self, body: dict) -> dict:
        """The upstream body: model, token-id fields, reasoning split, extra body, sampling pins."""
        body = copy.deepcopy(body)
        body["model"] = self.config.model
        body.pop("stream", None)
        for message in body.get("messages", []):
            if self.config.replace_developer_role_with_system and message.get("role") == "developer":
                message["role"] = "system"
            if self.config.uses_reasoning_parser and message.get("role") == "assistant":
                if isinstance(message.get("content"), str):
                    thoughts, rest = split_think(message["content"])
                    message["content"] = rest
                    if thoughts:
                        for key in REASONING_KEYS[self.config.reasoning_field]:
                            message[key] = thoughts[0]
        if self.config.chat_template_kwargs:
            body["chat_template_kwargs"] = {**self.config.chat_template_kwargs, **body.get("chat_template_kwargs", {})}
        if self.config.return_token_id_information:
            body.update(logprobs=True, top_logprobs=0, return_tokens_as_token_ids=True)
            if self.config.request_prompt_and_generation_token_ids:
                body["return_token_ids"] = True
            if body.get("n") not in (None, 1):
                raise ValueError("n must be 1 when return_token_id_information is true")
        if body.get("top_logprobs", 0) is None:
            body.pop("top_logprobs")
        if self.config.extra_body:
            body = {**self.config.extra_body, **body}
        body.update(self.config.sampling_overrides or {})
        return body

    async def chat(self, body: dict, session_id: str) -> dict:
        """One upstream chat completion, post-processed as Gym's vllm_model does."""
        upstream_body = self.prepare(body)
        base = self.replica(session_id)
        try:
            completion = await self.complete(base, upstream_body)
        except UpstreamError as exc:
            wording = classify(exc.status, exc.body)
            if wording is None:
                raise self.explained(exc, upstream_body) from None
            completion = self.empty_completion("length")
            completion["context_overflow"] = {"wording": wording.id, "upstream_status": exc.status,
                                              "message": message_of(exc.body)}
            return completion
        choice = completion["choices"][0]
        message = choice["message"]
        fields = [f for f in ("reasoning_content", "reasoning") if message.get(f)]
        thought = message.pop("reasoning_content", None) or message.pop("reasoning", None)
        message.pop("reasoning", None)
        if thought:
            if not self.config.uses_reasoning_parser:
                raise UpstreamError(f"model endpoint {base}", f"{base}/chat/completions", f"returned reasoning (field "
                                    f"{fields[0]!r}), but '{self.ctx.name}' has uses_reasoning_parser: false: set "
                                    "uses_reasoning_parser: true in its config, or serve the model without a "
                                    "reasoning parser")
            message["content"] = f"<think>{thought}</think>" + (message.get("content") or "")
        if self.config.return_token_id_information:
            try:
                await self.attach_tokens(completion, upstream_body, base)
            except TokenIdsError as exc:
                raise UpstreamError(f"model endpoint {base}", f"{base}/chat/completions", str(exc),
                                    kind="bad_token_ids") from None
        return completion

    async def complete(self, base: str, upstream_body: dict) -> dict:
        """``POST {base}/chat/completions``; a completion the engine cut off (``finish_reason:
        abort``, ``_kit/policy_answers.py``) is asked again with the retry backoff until
        ``retry_deadline_seconds`` after the first attempt, and past it is an
        :class:`UpstreamError` ``model_unavailable`` (with ``aborted_calls``). A completion that
        came after interruptions carries ``aborted_calls``."""
        url, t0, aborted = f"{base}/chat/completions", time.monotonic(), 0
        rule = self.peers.retry
        while True:
            completion = await self.peers.json(f"model endpoint {base}", url, upstream_body)
            reason = interrupted(completion)
            if reason is None:
                if aborted:
                    completion["aborted_calls"] = aborted
                return completion
            delay, waited = rule.delay(aborted), time.monotonic() - t0
            aborted += 1
            if waited + delay > rule.deadline_s:
                error = UpstreamError(f"model endpoint {base}", url, f"cut the completion off {aborted} time"
                                      f"{'s' if aborted != 1 else ''} (finish_reason {reason!r}: the engine aborted "
                                      f"it, e.g. for a weight update) over {waited:.1f}s; gave up at its retry "
                                      f"deadline of {rule.deadline_s:g}s (retry_deadline_seconds); an interrupted "
                                      "answer is never scored", kind="model_unavailable")
                error.extra["aborted_calls"] = aborted
                raise error
            await asyncio.sleep(delay)

    def explained(self, exc: UpstreamError, upstream_body: dict) -> UpstreamError:
        """``exc``, or a copy whose kind and message name the setting or flag that explains it
        (``_kit/policy_answers.py``, :func:`explain`)."""
        words = words_of(exc.body)
        found = explain(exc.status, words, upstream_body, self.ctx.name, self.config.reasoning_field,
                        self.config.model)
        if found is None:
            return exc
        kind, advice = found
        return UpstreamError(exc.upstream, exc.url, f"answered HTTP {exc.status}: {words}; {advice}", exc.status,
                             exc.body, kind=kind)

    async def attach_tokens(self, completion: dict, upstream_body: dict, base: str) -> None:
        """Put ``prompt_token_ids`` / ``generation_token_ids`` / ``generation_log_probs`` on the
        message; raises :class:`~_kit.policy_answers.TokenIdsError` when the endpoint gave none."""
        choice = completion["choices"][0]
        message = choice["message"]
        if all(message.get(f) is not None for f in TOKEN_FIELDS):
            return
        generation_ids, logprobs = token_ids((choice.get("logprobs") or {}).get("content"))
        prompt = completion.pop("prompt_token_ids", None)
        if prompt is None:
            tokenize_body = {k: upstream_body[k] for k in ("model", "messages", "tools", "chat_template_kwargs")
                             if k in upstream_body}
            tokenized = await self.peers.json(f"model endpoint {base}", f"{base.removesuffix('/v1')}/tokenize",
                                              tokenize_body)
            prompt = tokenized.get("tokens") if isinstance(tokenized, dict) else None
            where = "the /tokenize answer's tokens"
        else:
            where = "the completion's prompt_token_ids"
        message.update(prompt_token_ids=prompt_ids(prompt, where), generation_token_ids=generation_ids,
                       generation_log_probs=logprobs)
        choice.pop("logprobs", None)
        choice.pop("token_ids", None)

    def empty_completion(self, finish_reason: str) -> dict:
        """Gym's stand-in for a completion the upstream refused (context length)."""
        return {"id": "chtcmpl-empty", "object": "chat.completion", "created": int(time.time()),
                "model": self.config.model, "usage": None,
                "choices": [{"index": 0, "finish_reason": finish_reason,
                             "message": {"role": "assistant", "content": None, "tool_calls": None}}]}


def create_app(ctx: ServerContext):
    """The FastAPI app of this server."""
    model = VLLMModel(ctx)
    app = build_app(ctx, "vllm_model")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await request.json()
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return JSONResponse(status_code=422, content=error_body("invalid_request", "'messages' must be a list"))
        return await model.chat(body, request.state.session_id)

    @app.post("/v1/responses")
    async def responses(request: Request):
        body = await request.json()
        if not isinstance(body, dict) or "input" not in body:
            return JSONResponse(status_code=422, content=error_body("invalid_request", "'input' is required"))
        try:
            chat_body = to_chat_request(body, model.config.return_token_id_information)
        except ValueError as exc:
            return JSONResponse(status_code=422, content=error_body("invalid_request", str(exc)))
        completion = await model.chat(chat_body, request.state.session_id)
        response = to_response({**body, "model": model.config.model}, completion,
                               model.config.uses_reasoning_parser, model.config.return_token_id_information)
        for key in ("context_overflow", "aborted_calls"):
            if completion.get(key):
                response[key] = completion[key]
        return response

    return app


if __name__ == "__main__":
    run_server("responses_api_models", create_app)
