"""The upstream side of the built-in ``vllm_model``: shaping a chat request for the endpoint,
calling it, and reading its answer (docs/rollouts.md, "The model server keeps vLLM's meaning" and
"The model server's surface"; NeMo Gym 0.7.0 ``responses_api_models/vllm_model/app.py``).

Request shaping (:meth:`VLLMModel.prepare`), in Gym's order: the served ``model``; tools without
OpenAI's ``strict``; ``developer`` -> ``system`` (``replace_developer_role_with_system``); an
assistant message's ``<think>`` text moved under ``reasoning_field`` (``uses_reasoning_parser``,
unless ``preserve_reasoning_in_assistant_content``; dropped when ``uses_interleaved_reasoning`` is
false); ``chat_template_kwargs`` = the config's, then the request's own (only with
``forward_request_chat_template_kwargs``; else dropped, said once on stderr), then the row's
``metadata.chat_template_kwargs`` (a JSON object string); the config's ``extra_body`` and the row's
``metadata.extra_body`` beneath the body; ``continue_final_message`` for a trailing assistant
message (``continue_final_assistant_message``); the session as ``conversation_params``
(``forward_session_id_as_conversation_id``); vLLM's token-id fields; ``sampling_overrides`` last.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import sys
import time
from typing import Any

from _kit.config import StartupError
from _kit.overflow import classify, message_of
from _kit.peers import Peers, UpstreamError, words_of
from _kit.policy_answers import TokenIdsError, explain, interrupted, prompt_ids, token_ids
from _kit.reasoning import split_think
from _kit.responses import TOKEN_FIELDS
from _kit.retry import RetryRule
from _kit.server import ServerContext
from _kit.text import repaired
from completions import completion_body, logprob_entries, raw_prompt, to_chat_completion
from config_schema import VLLMModelConfig

# reasoning_field -> the keys an outgoing assistant message carries its reasoning under
REASONING_KEYS = {
    "both": ("reasoning_content", "reasoning"),
    "reasoning": ("reasoning",),
    "reasoning_content": ("reasoning_content",),
}
TOKENIZE_FIELDS = ("model", "messages", "tools", "chat_template_kwargs")


class Propagated(Exception):
    """An upstream answer passed on as it is (``propagate_context_overflow_errors``)."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.body = status, body


def _json_object(metadata: dict, key: str) -> dict:
    """``metadata[key]``: a JSON object string (NeMo Gym's per-row override), ``{}`` when absent."""
    raw = metadata.get(key)
    if raw in (None, ""):
        return {}
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as exc:
        raise ValueError(f"metadata.{key} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"metadata.{key} must be a JSON object, not {type(value).__name__}")
    return value


class VLLMModel:
    """Talks to the upstream replicas; one instance per server process."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.config = ctx.parse(VLLMModelConfig)
        if not self.config.base_url:
            raise StartupError(f"'{ctx.name}': base_url is empty (set policy_base_url)")
        self.replicas = [url.rstrip("/") for url in self.config.base_url]
        headers = {"authorization": f"Bearer {self.config.api_key}", **self.config.default_headers}
        self.peers = Peers(
            self.config.request_timeout_seconds,
            headers=headers,
            retry=RetryRule(self.config.retry_deadline_seconds, idempotent=True),
            gave_up="model_unavailable",
        )
        self.warned_kwargs = False

    def replica(self, session_id: str) -> str:
        """The replica base URL of a session (stable: sha256 of the session id modulo n)."""
        digest = hashlib.sha256(session_id.encode()).digest()
        return self.replicas[int.from_bytes(digest[:8], "big") % len(self.replicas)]

    def _reasoning(self, message: dict) -> None:
        if not self.config.uses_reasoning_parser or self.config.preserve_reasoning_in_assistant_content:
            return
        if message.get("role") != "assistant" or not isinstance(message.get("content"), str):
            return
        thoughts, rest = split_think(message["content"])
        message["content"] = rest
        if thoughts and self.config.uses_interleaved_reasoning:
            for key in REASONING_KEYS[self.config.reasoning_field]:
                message[key] = thoughts[0]

    def _template_kwargs(self, body: dict, metadata: dict) -> dict:
        kwargs = dict(self.config.chat_template_kwargs or {})
        own = body.pop("chat_template_kwargs", None)
        if own and self.config.forward_request_chat_template_kwargs:
            kwargs.update(own)
        elif own and not self.warned_kwargs:
            self.warned_kwargs = True
            print(
                f"{self.ctx.name}: a request's own chat_template_kwargs are dropped (set "
                "forward_request_chat_template_kwargs: true to pass them; the config's and a row's "
                "metadata.chat_template_kwargs apply); said once",
                file=sys.stderr,
                flush=True,
            )
        kwargs.update(_json_object(metadata, "chat_template_kwargs"))
        return kwargs

    def prepare(self, body: dict, session_id: str, tokens: bool) -> dict:
        """The upstream chat body (module doc); ``tokens`` asks for vLLM's token ids.
        ``ValueError`` for a row's metadata that is no JSON object, or ``n`` > 1 with token ids."""
        body = copy.deepcopy(body)
        body["model"] = self.config.model
        body.pop("stream", None)
        body.pop("stream_options", None)
        for tool in body.get("tools") or []:
            if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
                tool["function"].pop("strict", None)
        for message in body.get("messages", []):
            if self.config.replace_developer_role_with_system and message.get("role") == "developer":
                message["role"] = "system"
            self._reasoning(message)
        metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        kwargs = self._template_kwargs(body, metadata)
        if kwargs:
            body["chat_template_kwargs"] = kwargs
        messages = body.get("messages") or []
        if self.config.continue_final_assistant_message and messages and messages[-1].get("role") == "assistant":
            body.update(continue_final_message=True, add_generation_prompt=False)
        if self.config.forward_session_id_as_conversation_id:
            body["conversation_params"] = {"conversation_id": session_id}
        if tokens:
            body.update(logprobs=True, top_logprobs=0, return_tokens_as_token_ids=True)
            if self.config.request_prompt_and_generation_token_ids:
                body["return_token_ids"] = True
            if body.get("n") not in (None, 1):
                raise ValueError("n must be 1 when token ids are returned or captured")
        if body.get("top_logprobs", 0) is None:
            body.pop("top_logprobs")
        extra = {**(self.config.extra_body or {}), **_json_object(metadata, "extra_body")}
        body = {**extra, **body}
        body.update(self.config.sampling_overrides or {})
        return body

    async def chat(self, body: dict, session_id: str, capture: bool = False) -> dict:
        """One upstream completion for a chat request, post-processed as Gym's vllm_model does.
        ``capture``: token ids are needed for training-token capture even when the config does not
        return them (they are then put on the message all the same; the caller strips them)."""
        tokens = self.config.return_token_id_information or capture
        try:
            upstream_body = self.prepare(body, session_id, tokens)
        except (TypeError, KeyError, AttributeError) as exc:  # a message of the wrong shape: the row's data (422)
            raise ValueError(f"the request cannot be read: {type(exc).__name__}: {exc}") from None
        messages = upstream_body.get("messages") or []
        if (
            not self.config.sequential_reasoning_allowed
            and messages
            and messages[-1].get("role") == "assistant"
            and not (messages[-1].get("content") or messages[-1].get("tool_calls"))
        ):
            return self.empty_completion("content_filter")
        base = self.replica(session_id)
        try:
            if self.config.use_completions_api:
                completion = await self.via_completions(base, upstream_body, tokens)
            else:
                completion = await self.complete(base, "chat/completions", upstream_body)
        except UpstreamError as exc:
            wording = classify(exc.status, exc.body)
            if wording is None:
                raise self.explained(exc, upstream_body) from None
            if self.config.propagate_context_overflow_errors:
                raise Propagated(exc.status or 400, exc.body) from None
            completion = self.empty_completion("length")
            completion["context_overflow"] = {
                "wording": wording.id,
                "upstream_status": exc.status,
                "message": message_of(exc.body),
            }
            return completion
        self.reasoning_of(completion, base, upstream_body.get("continue_final_message", False))
        if tokens:
            try:
                await self.attach_tokens(completion, upstream_body, base)
            except TokenIdsError as exc:
                raise UpstreamError(
                    f"model endpoint {base}", f"{base}/chat/completions", str(exc), kind="bad_token_ids"
                ) from None
        return completion

    def reasoning_of(self, completion: dict, base: str, continued: bool) -> None:
        """Fold the upstream's reasoning field into ``<think>`` content (or refuse it, module doc)."""
        message = completion["choices"][0]["message"]
        fields = [f for f in ("reasoning_content", "reasoning") if message.get(f)]
        thought = message.pop("reasoning_content", None) or message.pop("reasoning", None)
        message.pop("reasoning", None)
        if not thought:
            return
        if not self.config.uses_reasoning_parser:
            raise UpstreamError(
                f"model endpoint {base}",
                f"{base}/chat/completions",
                f"returned reasoning (field "
                f"{fields[0]!r}), but '{self.ctx.name}' has uses_reasoning_parser: false: set "
                "uses_reasoning_parser: true in its config, or serve the model without a "
                "reasoning parser",
            )
        rest = message.get("content") or ""
        message["content"] = thought + rest if continued else f"<think>{thought}</think>" + rest

    async def via_completions(self, base: str, chat_body: dict, tokens: bool) -> dict:
        """The ``use_completions_api`` path (``completions.py``): a chat completion-shaped answer."""
        if self.config.render_chat_template:
            tokenize = {k: chat_body[k] for k in TOKENIZE_FIELDS if k in chat_body}
            rendered = await self.peers.json(
                f"model endpoint {base}",
                f"{base.removesuffix('/v1')}/tokenize",
                {**tokenize, "add_generation_prompt": True},
            )
            prompt = prompt_ids(
                rendered.get("tokens") if isinstance(rendered, dict) else None, "the /tokenize answer's tokens"
            )
        else:
            prompt = raw_prompt(chat_body)
        body = completion_body(
            chat_body, prompt, self.config.model, tokens, self.config.extra_body, self.config.sampling_overrides
        )
        raw = await self.complete(base, "completions", body)
        completion = to_chat_completion(raw, self.config.model)
        if raw.get("repaired_text"):
            completion["repaired_text"] = raw["repaired_text"]
        if not tokens:
            completion["choices"][0].pop("text_logprobs", None)
            completion["choices"][0].pop("token_ids", None)
        return completion

    async def complete(self, base: str, route: str, upstream_body: dict) -> dict:
        """``POST {base}/{route}``; a completion the engine cut off (``finish_reason: abort``,
        ``_kit/policy_answers.py``) is asked again with the retry backoff until
        ``retry_deadline_seconds`` after the first attempt, and past it is an
        :class:`UpstreamError` ``model_unavailable`` (with ``aborted_calls``). A completion that
        came after interruptions carries ``aborted_calls``; one whose strings held code points that
        are no text (lone surrogates, NUL, control characters) has them replaced by U+FFFD and
        carries their count as ``repaired_text`` (``_kit/text.py``)."""
        url, t0, aborted = f"{base}/{route}", time.monotonic(), 0
        rule = self.peers.retry
        while True:
            completion, fixed = repaired(await self.peers.json(f"model endpoint {base}", url, upstream_body))
            reason = interrupted(completion)
            if reason is None:
                if aborted:
                    completion["aborted_calls"] = aborted
                if fixed and isinstance(completion, dict):
                    completion["repaired_text"] = fixed  # code points that were no text (``_kit/text.py``)
                return completion
            delay, waited = rule.delay(aborted), time.monotonic() - t0
            aborted += 1
            if waited + delay > rule.deadline_s:
                error = UpstreamError(
                    f"model endpoint {base}",
                    url,
                    f"cut the completion off {aborted} time"
                    f"{'s' if aborted != 1 else ''} (finish_reason {reason!r}: the engine aborted "
                    f"it, e.g. for a weight update) over {waited:.1f}s; gave up at its retry "
                    f"deadline of {rule.deadline_s:g}s (retry_deadline_seconds); an interrupted "
                    "answer is never scored",
                    kind="model_unavailable",
                )
                error.extra["aborted_calls"] = aborted
                raise error
            await asyncio.sleep(delay)

    async def native(self, body: dict, session_id: str) -> dict:
        """``is_responses_native``: the Responses request sent to the endpoint's own ``/responses``."""
        out = copy.deepcopy(body)
        out["model"] = self.config.model
        out.pop("stream", None)
        if self.config.chat_template_kwargs:
            out["chat_template_kwargs"] = copy.deepcopy(self.config.chat_template_kwargs)
        out = {**(self.config.extra_body or {}), **out, **(self.config.sampling_overrides or {})}
        base = self.replica(session_id)
        try:
            return await self.complete(base, "responses", out)
        except UpstreamError as exc:
            raise self.explained(exc, out) from None

    def explained(self, exc: UpstreamError, upstream_body: dict) -> UpstreamError:
        """``exc``, or a copy whose kind and message name the setting or flag that explains it
        (``_kit/policy_answers.py``, :func:`explain`)."""
        words = words_of(exc.body)
        found = explain(exc.status, words, upstream_body, self.ctx.name, self.config.reasoning_field, self.config.model)
        if found is None:
            return exc
        kind, advice = found
        return UpstreamError(
            exc.upstream, exc.url, f"answered HTTP {exc.status}: {words}; {advice}", exc.status, exc.body, kind=kind
        )

    async def attach_tokens(self, completion: dict, upstream_body: dict, base: str) -> None:
        """Put ``prompt_token_ids`` / ``generation_token_ids`` / ``generation_log_probs`` on the
        message; raises :class:`~_kit.policy_answers.TokenIdsError` when the endpoint gave none."""
        choice = completion["choices"][0]
        message = choice["message"]
        if all(message.get(f) is not None for f in TOKEN_FIELDS):
            return
        entries = (
            logprob_entries(choice.pop("text_logprobs", None))
            if self.config.use_completions_api
            else (choice.get("logprobs") or {}).get("content")
        )
        generation_ids, logprobs = token_ids(entries)
        inline = choice.get("token_ids")
        if inline is not None and inline != generation_ids:
            raise TokenIdsError("returned token_ids that disagree with its logprob tokens")
        prompt = completion.pop("prompt_token_ids", None)
        if prompt is None:
            tokenize_body = {k: upstream_body[k] for k in TOKENIZE_FIELDS if k in upstream_body}
            tokenized = await self.peers.json(
                f"model endpoint {base}", f"{base.removesuffix('/v1')}/tokenize", tokenize_body
            )
            prompt = tokenized.get("tokens") if isinstance(tokenized, dict) else None
            where = "the /tokenize answer's tokens"
        else:
            where = "the completion's prompt_token_ids"
        message.update(
            prompt_token_ids=prompt_ids(prompt, where),
            generation_token_ids=generation_ids,
            generation_log_probs=logprobs,
        )
        choice.pop("logprobs", None)
        choice.pop("token_ids", None)

    def empty_completion(self, finish_reason: str) -> dict:
        """Gym's stand-in for a completion the upstream refused (context length)."""
        return {
            "id": "chtcmpl-empty",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.config.model,
            "usage": None,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": finish_reason,
                    "message": {"role": "assistant", "content": None, "tool_calls": None},
                }
            ],
        }
