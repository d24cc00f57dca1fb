"""The stub model's HTTP app: an OpenAI-compatible server that answers like vLLM.

Endpoints (shapes as vLLM's OpenAI server):
``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /tokenize``,
``GET /health``, ``GET /``, ``GET /stub/stats`` (``{"chat_completions": n}`` served so far, to observe replica choice),
and ``POST /stub/reset`` (``{}``: the per-prompt counts below start again from 0, so the next run
of the same rows samples as the first did; ``dry-run --watch`` calls it before each run).

vLLM fields honoured on chat completions: ``logprobs``/``top_logprobs`` (``choices[].logprobs.
content[]``), ``return_tokens_as_token_ids`` (tokens spelled ``token_id:<id>``), ``return_token_ids``
(top-level ``prompt_token_ids`` and ``choices[].token_ids``), ``max_tokens`` (cut -> finish_reason
``length``), ``n``, ``seed``, ``temperature`` (0 = greedy). As vLLM 0.32: reasoning (``--reasoning``)
comes as ``message.reasoning``; generated ids end with the end-of-turn token; a prompt longer than
``max_model_len`` (or exactly as long), or ``max_tokens`` above it, gets vLLM's 400 (its wordings in
:mod:`gym_runtime.stub_model.quirks`), while a prompt that fits is cut at the context length.

Sampling is seeded: the generator of a request is derived from the server seed, the prompt
(messages + tools) and how many times that prompt was seen before (or the request's ``seed``),
so k samples of one prompt differ, and a run is reproducible for a given seed and request order.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from gym_runtime.stub_model.policy import Directives, generate, read_directives
from gym_runtime.stub_model.quirks import overflow_body, think_content, too_long
from gym_runtime.stub_model.tokenizer import SPECIAL_TOKENS, render_chat, render_tool_call, tokenize


@dataclass(frozen=True)
class StubSettings:
    """Behaviour of one stub server.

    ``seed``: base seed; ``model``: the served model name; ``p_correct``: probability of a correct
    answer; ``max_model_len``: context length in tokens; ``reasoning``: also return
    ``reasoning`` (as vLLM with a reasoning parser); ``api_key``: when set, require
    ``Authorization: Bearer <key>``; ``modes``: ``NAME=VALUE`` directives applied to every request
    (:mod:`gym_runtime.stub_model.quirks`).
    """

    seed: int = 0
    model: str = "stub-model"
    p_correct: float = 0.5
    max_model_len: int = 32768
    reasoning: bool = False
    api_key: str | None = None
    modes: tuple[str, ...] = ()


def _error(status: int, message: str, kind: str = "BadRequestError", param: str | None = None) -> JSONResponse:
    return JSONResponse(
        status_code=status,
        content={"error": {"message": message, "type": kind, "param": param, "code": status}},
    )


class _Sampler:
    """Derives one ``random.Random`` per request from seed, prompt and occurrence count."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._seen: Counter[str] = Counter()
        self.served = 0

    def reset(self) -> None:
        """Count every prompt as never seen (the next request of each samples as the first did)."""
        self._seen.clear()

    def rng(self, prompt_key: str, request_seed: int | None) -> random.Random:
        self.served += 1
        if request_seed is None:
            occurrence = self._seen[prompt_key]
            self._seen[prompt_key] += 1
            material = f"{self._seed}|{prompt_key}|{occurrence}"
        else:
            material = f"{self._seed}|{prompt_key}|seed={request_seed}"
        return random.Random(hashlib.sha256(material.encode()).hexdigest())


def _choice(
    index: int, turn, rng: random.Random, body: dict, limit: int, reasoning: bool, directives: Directives
) -> tuple[dict, list[int], int]:
    cut = False
    reasoning = reasoning or bool(directives.reasoning)
    if directives.think:
        turn.content, cut = think_content(directives.think, turn.reasoning or "", turn.content or "")
        turn.reasoning, reasoning = None, False
    raw = turn.content or ""
    calls = []
    for call in turn.tool_calls:
        raw += render_tool_call(call["name"], call["arguments"])
        calls.append(
            {
                "id": f"chatcmpl-tool-{rng.getrandbits(64):016x}",
                "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]},
            }
        )
    thought = turn.reasoning if reasoning else None
    if thought:
        raw = f"<think>{thought}</think>" + raw
    ids, pieces = tokenize(raw)
    finish = "length" if cut else ("tool_calls" if calls else "stop")
    if not cut:  # vLLM's generated ids end with the end-of-turn token the model emitted
        ids, pieces = ids + [SPECIAL_TOKENS["<|im_end|>"]], pieces + ["<|im_end|>"]
    message = {
        "role": "assistant",
        "content": turn.content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
    }
    if len(ids) > limit:
        ids, pieces = ids[:limit], pieces[:limit]
        text = "".join(pieces)
        if thought and "</think>" not in text:  # cut while thinking: vLLM keeps the partial reasoning
            thought, visible = text.removeprefix("<think>"), None
        else:
            visible = text.split("</think>")[-1] if "</think>" in text else text
            thought = thought if thought and "</think>" in text else None
        message["content"], calls, finish = visible or None, [], "length"
    if calls:
        message["tool_calls"] = calls
    field = directives.reasoning or "reasoning"  # vLLM >= v0.10 sends `reasoning` only
    if thought:
        message[field] = thought
    greedy = body.get("temperature") == 0
    logprobs = [0.0 if greedy else -round(rng.random() * 2, 4) for _ in ids]
    choice = {
        "index": index,
        "message": message,
        "logprobs": None,
        "finish_reason": finish,
        "stop_reason": None,
        "token_ids": None,
    }
    if body.get("logprobs"):
        as_ids = body.get("return_tokens_as_token_ids")
        choice["logprobs"] = {
            "content": [
                {
                    "token": f"token_id:{i}" if as_ids else piece,
                    "logprob": lp,
                    "bytes": list(piece.encode()),
                    "top_logprobs": [],
                }
                for i, piece, lp in zip(ids, pieces, logprobs, strict=True)
            ]
        }
    if body.get("return_token_ids"):
        choice["token_ids"] = ids
    reasoning_ids = len(tokenize(f"<think>{thought}</think>")[0]) if thought else 0
    return choice, ids, reasoning_ids


def create_app(seed: int = 0, model: str = "stub-model", **options) -> FastAPI:
    """The stub's FastAPI app; ``options`` are the other :class:`StubSettings` fields."""
    settings = StubSettings(seed=seed, model=model, **options)
    sampler = _Sampler(seed)
    app = FastAPI(title="gym-runtime stub model")
    app.state.settings = settings

    @app.middleware("http")
    async def check_api_key(request: Request, call_next):
        open_paths = ("/", "/health")
        if settings.api_key and request.url.path not in open_paths:
            if request.headers.get("authorization") != f"Bearer {settings.api_key}":
                return JSONResponse(status_code=401, content={"error": "Unauthorized"})
        return await call_next(request)

    @app.get("/")
    async def root() -> dict:
        return {"status": "ok", "model": settings.model}

    @app.get("/health")
    async def health() -> dict:
        return {}

    @app.get("/stub/stats")
    async def stats() -> dict:
        return {"chat_completions": sampler.served}

    @app.post("/stub/reset")
    async def reset() -> dict:
        sampler.reset()
        return {}

    @app.get("/v1/models")
    async def models() -> dict:
        card = {
            "id": settings.model,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": settings.model,
            "parent": None,
            "max_model_len": settings.max_model_len,
        }
        return {"object": "list", "data": [card]}

    @app.post("/tokenize")
    async def tokenize_route(request: Request):
        body = await request.json()
        if "messages" in body:
            text = render_chat(body["messages"], body.get("tools"), body.get("add_generation_prompt", True))
        else:
            text = body.get("prompt", "")
        ids, pieces = tokenize(text)
        return {
            "count": len(ids),
            "max_model_len": settings.max_model_len,
            "tokens": ids,
            "token_strs": pieces if body.get("return_token_strs") else None,
        }

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        try:
            body = await request.json()
        except json.JSONDecodeError as exc:
            return _error(400, f"Invalid JSON body: {exc}")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "Cannot apply chat template to an empty conversation. Provide at least one message.")
        if body.get("stream"):
            return _error(400, "the stub model does not stream")
        requested_model = body.get("model")
        if requested_model not in (None, settings.model):
            return _error(
                404,
                f"The model `{requested_model}` does not exist. Valid aliases: {settings.model}.",
                "NotFoundError",
                "model",
            )
        directives = read_directives(messages, settings.modes)
        if directives.error_status:
            return _error(directives.error_status, "stub error requested by [stub:error]", "InternalServerError")
        tools = body.get("tools") or None  # rendered into the prompt even with tool_choice none, as vLLM does
        callable_tools = None if body.get("tool_choice") == "none" else tools
        prompt_ids, _ = tokenize(render_chat(messages, tools))
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        if directives.overflow:
            return JSONResponse(
                status_code=400,
                content=overflow_body(directives.overflow, len(prompt_ids), settings.max_model_len, max_tokens),
            )
        refused = too_long(len(prompt_ids), settings.max_model_len, max_tokens)
        if refused is not None:
            return JSONResponse(status_code=400, content=refused)
        room = settings.max_model_len - len(prompt_ids)
        limit = min(max_tokens, room) if max_tokens is not None else room
        prompt_key = hashlib.sha256(json.dumps([messages, tools], sort_keys=True).encode()).hexdigest()
        rng = sampler.rng(prompt_key, body.get("seed"))
        greedy = body.get("temperature") == 0
        choices, completion_tokens, reasoning_tokens = [], 0, 0
        for index in range(int(body.get("n") or 1)):
            turn = generate(messages, callable_tools, rng, settings.p_correct, greedy, directives)
            choice, ids, thought_ids = _choice(index, turn, rng, body, limit, settings.reasoning, directives)
            choices.append(choice)
            completion_tokens += len(ids)
            reasoning_tokens += thought_ids
        result = {
            "id": f"chatcmpl-{uuid.UUID(int=rng.getrandbits(128)).hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": settings.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": completion_tokens,
                "total_tokens": len(prompt_ids) + completion_tokens,
                "prompt_tokens_details": None,
                "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
            },
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "kv_transfer_params": None,
        }
        if body.get("return_token_ids"):
            result["prompt_token_ids"] = prompt_ids
        return result

    @app.post("/v1/completions")
    async def completions(request: Request):
        """vLLM's completions API: ``prompt`` text or token ids; ``logprobs`` N (the sampled token's,
        ``tokens`` spelt ``token_id:<id>`` with ``return_tokens_as_token_ids``); ``return_token_ids``
        puts ``prompt_token_ids`` and ``token_ids`` on the choice; ``max_tokens`` defaults to 16."""
        body = await request.json()
        prompt = body.get("prompt")
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            prompt_ids, text = prompt, ""
        elif isinstance(prompt, str):
            prompt_ids, text = tokenize(prompt)[0], prompt
        else:
            return _error(400, "prompt must be a string or a list of token ids")
        if body.get("model") not in (None, settings.model):
            return _error(
                404,
                f"The model `{body.get('model')}` does not exist. Valid aliases: {settings.model}.",
                "NotFoundError",
                "model",
            )
        max_tokens = body.get("max_tokens", 16)
        refused = too_long(len(prompt_ids), settings.max_model_len, max_tokens)
        if refused is not None:
            return JSONResponse(status_code=400, content=refused)
        rng = sampler.rng(hashlib.sha256(json.dumps(prompt).encode()).hexdigest(), body.get("seed"))
        turn = generate(
            [{"role": "user", "content": text}], None, rng, settings.p_correct, body.get("temperature") == 0
        )
        ids, pieces = tokenize(turn.content or "")
        ids, pieces = ids + [SPECIAL_TOKENS["<|im_end|>"]], pieces + [""]
        limit = min(max_tokens, settings.max_model_len - len(prompt_ids))
        finish = "length" if len(ids) > limit else "stop"
        ids, pieces = ids[:limit], pieces[:limit]
        choice = {
            "index": 0,
            "text": "".join(pieces),
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
            "token_ids": None,
            "prompt_logprobs": None,
            "prompt_token_ids": None,
        }
        if body.get("logprobs") is not None:
            as_ids = body.get("return_tokens_as_token_ids")
            choice["logprobs"] = {
                "text_offset": [],
                "token_logprobs": [0.0] * len(ids),
                "top_logprobs": None,
                "tokens": [f"token_id:{i}" if as_ids else p for i, p in zip(ids, pieces, strict=True)],
            }
        if body.get("return_token_ids"):
            choice.update(token_ids=ids, prompt_token_ids=prompt_ids)
        return {
            "id": f"cmpl-{uuid.UUID(int=rng.getrandbits(128)).hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": settings.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(ids),
                "total_tokens": len(prompt_ids) + len(ids),
            },
        }

    return app
