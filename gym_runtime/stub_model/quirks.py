"""Misbehaviours of real policies and real vLLM servers, reproduced by the stub model on request.

Each is chosen per request with a ``[stub:NAME=VALUE]`` directive in the prompt, or for every
request with ``python -m gym_runtime.stub_model --mode NAME=VALUE`` (the failure cases' rows carry
no directives):

``call=NAME``
    call tool NAME whether the request offered it or not (a hallucinated tool, or the resources
    server's ``verify`` route, case C31); an unoffered name gets :func:`grader_body` as arguments.
    After a tool output that holds an ``expected`` value, the answer is that value.
``tool_args=KIND``
    the call's arguments are ``empty`` (``""``), ``null``, ``list``, ``string``, ``number``,
    ``invalid`` (cut JSON), ``huge`` (over 1 MB) or ``deep`` (10 000 nested lists).
``overflow=ID``
    answer HTTP 400 with vLLM's context-overflow message :data:`OVERFLOW` ``[ID]`` (case C30).
``think=SHAPE``
    put the reasoning into ``content`` as ``pair`` (``<think>R</think>A``), ``close`` (``R</think>A``,
    the opening tag was in the chat template) or ``open`` (``<think>R`` cut at ``length``), with no
    reasoning field.
``reasoning=FIELD``
    return the reasoning only in ``FIELD`` (``reasoning``, vLLM's name from v0.10 on, or
    ``reasoning_content``), whatever ``--reasoning`` says.
"""

from __future__ import annotations

import json
from typing import Any

from gym_runtime.stub_model.tokenizer import content_text


def grader_body(user_text: str) -> dict[str, Any]:
    """Arguments a policy invents for a ``verify`` call: a made-up verify request."""
    return {"responses_create_params": {"input": user_text}, "response": {"output": []}}


def tool_arguments_of(kind: str | None, proper: dict[str, Any]) -> str:
    """The ``arguments`` string of a tool call: ``proper`` as JSON, or the malformed ``kind``."""
    shapes = {
        None: lambda: json.dumps(proper),
        "empty": lambda: "",
        "null": lambda: "null",
        "list": lambda: json.dumps(list(proper.values())),
        "string": lambda: json.dumps("just text"),
        "number": lambda: "42",
        "invalid": lambda: json.dumps(proper)[:-1],
        "huge": lambda: json.dumps({**proper, "padding": "x" * 1_200_000}),
        "deep": lambda: "[" * 10_000 + "]" * 10_000,
    }
    return shapes.get(kind, shapes[None])()


def leaked_expected(content: Any) -> str | None:
    """The ``expected`` value a tool output (a grader's verify answer) leaked, as text, else None."""
    try:
        value = json.loads(content_text(content))
    except (ValueError, RecursionError):
        return None
    if isinstance(value, dict) and value.get("expected") is not None:
        expected = value["expected"]
        return str(int(expected)) if isinstance(expected, float) and expected.is_integer() else str(expected)
    return None


def _new(message: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}


def _old(message: str) -> dict[str, Any]:  # vLLM before v0.7 answered errors at the top level
    return {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}


# vLLM's own words for a prompt that does not fit (id -> body for prompt length P, limit M, max_tokens T).
OVERFLOW = {
    "vllm-context-length": lambda p, m, t: _old(
        f"This model's maximum context length is {m} tokens. However, you requested {p + t} tokens ({p} in the "
        f"messages, {t} in the completion). Please reduce the length of the messages or completion."
    ),
    "vllm-context-length-input": lambda p, m, t: _new(
        f"This model's maximum context length is {m} tokens. However, your request has {p} input tokens. "
        "Please reduce the length of the input messages."
    ),
    "vllm-max-tokens": lambda p, m, t: _new(
        f"'max_tokens' or 'max_completion_tokens' is too large: {t}. This model's maximum context length is {m} "
        f"tokens and your request has {p} input tokens ({t} > {m} - {p})."
    ),
    "vllm-prompt-length": lambda p, m, t: _new(f"Prompt length of {p} is longer than the maximum model length of {m}."),
    "vllm-decoder-prompt": lambda p, m, t: _old(
        f"The decoder prompt (length {p}) is longer than the maximum model length of {m}. Make sure that "
        "`max_model_len` is no smaller than the number of text tokens."
    ),
    "vllm-decoder-prompt-output": lambda p, m, t: _new(
        f"The decoder prompt (length {p}) plus the number of requested output tokens (at least 1) is longer than "
        f"the maximum model length of {m}. Make sure that `max_model_len` is no smaller than the number of text "
        "tokens (prompt + requested output tokens)."
    ),
    "vllm-too-long-to-fit": lambda p, m, t: _old(
        f"The prompt (total length {p}) is too long to fit into the model (context length {m}). Make sure that "
        "`max_model_len` is no smaller than the number of text tokens plus multimodal tokens."
    ),
    "vllm-max-tokens-min": lambda p, m, t: _new("max_tokens must be at least 1, got 0."),
}

# What vLLM v0.32 answers a request that cannot run (the stub's own answers, :func:`too_long`): the
# first two are context overflows (``vllm-context-length``, ``vllm-max-tokens-min``), the last a
# configuration error (no prompt would ever fit).
V032 = {
    "prompt": lambda p, m, t: _new(
        f"This model's maximum context length is {m} tokens. However, your prompt contains at least {m + 1} input "
        "tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input "
        f"prompt. (parameter=input_tokens, value={m + 1})",
        "input_tokens",
    ),
    "no_room": lambda p, m, t: _new(
        "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)", "max_tokens"
    ),
    "max_tokens": lambda p, m, t: _new(
        f"max_tokens={t} cannot be greater than max_model_len={m}. Please request fewer output tokens. "
        f"(parameter=max_tokens, value={t})",
        "max_tokens",
    ),
}


def too_long(prompt_len: int, max_model_len: int, max_tokens: int | None) -> dict[str, Any] | None:
    """vLLM v0.32's 400 body for a request that cannot run, else None: a prompt longer than the context,
    one exactly as long (no room for one output token: vLLM sizes max_tokens to 0 and refuses that),
    or a ``max_tokens`` above the context length. A prompt that fits with a ``max_tokens`` that does
    not is served and cut at the context length (``finish_reason: length``)."""
    if prompt_len > max_model_len:
        return V032["prompt"](prompt_len, max_model_len, max_tokens or 0)
    if prompt_len == max_model_len:
        return V032["no_room"](prompt_len, max_model_len, 0)
    if max_tokens is not None and max_tokens > max_model_len:
        return V032["max_tokens"](prompt_len, max_model_len, max_tokens)
    return None


def overflow_body(wording: str, prompt_len: int, max_model_len: int, max_tokens: int | None) -> dict[str, Any]:
    """The 400 body of :data:`OVERFLOW` ``[wording]`` (the V1 decoder-prompt one when unknown)."""
    make = OVERFLOW.get(wording, OVERFLOW["vllm-decoder-prompt"])
    return make(max(prompt_len, max_model_len + 1), max_model_len, max_tokens or 16)


def think_content(shape: str, reasoning: str, content: str) -> tuple[str, bool]:
    """``(content, cut)``: the reasoning put into the content in ``shape``; ``cut`` means the
    completion ends at ``length`` (the ``open`` shape)."""
    if shape == "close":
        return f"{reasoning}</think>{content}", False
    if shape == "open":
        return f"<think>{reasoning}", True
    return f"<think>{reasoning}</think>{content}", False
