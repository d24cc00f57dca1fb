"""Which upstream errors mean "the prompt no longer fits the context": the one table of wordings.

NeMo Gym 0.4.0 ``responses_api_models/vllm_model/app.py`` turns an upstream HTTP 400 whose body
contains ``context length`` or ``max_tokens`` into an empty completion with ``finish_reason:
length``, so a long multi-turn episode ends (and is scored) instead of failing. vLLM words the
same condition in several ways that match neither (case C30), so each wording is a row below,
with where it comes from. :func:`classify` matches the JSON body of an HTTP 400/413/422 answer
(case-insensitive) against :data:`WORDINGS` in order (the most specific first: vLLM's
``max_tokens`` message also says "maximum context length").

Unlike Gym, a body that merely mentions ``max_tokens`` is *not* a context overflow: OpenAI's
"Unsupported parameter: 'max_tokens' is not supported with this model" is a configuration error,
and turning it into empty completions would silently score every rollout 0.

=========================  ==============================================================  ==========================================
id                         example wording                                                 source (vLLM versions)
=========================  ==============================================================  ==========================================
``vllm-context-length``    "This model's maximum context length is 4096 tokens. However,   vLLM OpenAI server ``serving_engine.py``
                           you requested 5012 tokens (...)" and its later forms "However,  (``_validate_prompt_and_tokenize`` /
                           your request has N input tokens", "you requested N output       ``_validate_input``), v0.2 to current;
                           tokens and your prompt contains at least M input tokens"        also OpenAI's API and SGLang
``vllm-max-tokens``        "'max_tokens' or 'max_completion_tokens' is too large: 1000.    vLLM ``serving_engine.py``
                           This model's maximum context length is ..."; OpenAI:            ``_validate_input``, v0.7 to current;
                           "max_tokens is too large: N. This model supports at most ..."   OpenAI's API
``vllm-prompt-length``     "Prompt length of 4096 is longer than the maximum model length  vLLM V1 ``v1/engine/processor.py``,
                           of 4096."                                                       v0.7-v0.8 (V1 default from v0.8.0)
``vllm-decoder-prompt``    "The decoder prompt (length 5012) is longer than the maximum    vLLM V0 ``engine/llm_engine.py`` v0.6-v0.10;
                           model length of 4096. Make sure that `max_model_len` ...";      V1 ``v1/engine/processor.py`` v0.9-v0.10,
                           "The decoder prompt (length N) plus the number of requested     ``v1/engine/input_processor.py`` v0.11 to
                           output tokens (at least 1) is longer than the maximum model     current
                           length of M."
``vllm-too-long-to-fit``   "The prompt (total length 25938) is too long to fit into the    vLLM V0 ``engine/llm_engine.py``, v0.6
                           model (context length 4096)."                                   (multimodal prompts)
``vllm-max-tokens-min``    "max_tokens must be at least 1, got 0." (an agent that sizes    vLLM ``sampling_params.py`` ``_verify_args``,
                           ``max_tokens`` from what is left of the context)                all versions (listed by Gym's vllm_model)
``sglang-context-length``  "The input (5012 tokens) is longer than the model's context     SGLang OpenAI server
                           length (4096 tokens)."
``openai-code``            ``"code": "context_length_exceeded"``                           OpenAI's API and servers mimicking it
``tgi-max-new-tokens``     "`inputs` tokens + `max_new_tokens` must be <= 4096."           Hugging Face TGI (HTTP 422)
``context-length``         any other "context length" in the body (Gym's own test)         NeMo Gym 0.4.0 ``vllm_model``
=========================  ==============================================================  ==========================================
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

STATUSES = (400, 413, 422)


@dataclass(frozen=True)
class Wording:
    """One row of the table: ``id``, the case-insensitive ``pattern`` and its ``source``."""

    id: str
    pattern: re.Pattern[str]
    source: str


def _w(id_: str, pattern: str, source: str) -> Wording:
    return Wording(id_, re.compile(pattern, re.IGNORECASE), source)


WORDINGS: tuple[Wording, ...] = (
    _w(
        "vllm-max-tokens",
        r"max_(?:completion_)?tokens\W+(?:or\W+max_completion_tokens\W+)?is too large",
        "vLLM serving_engine.py _validate_input, v0.7 to current; OpenAI",
    ),
    _w(
        "vllm-prompt-length",
        r"prompt length of \d+ is longer than the maximum model length",
        "vLLM V1 v1/engine/processor.py, v0.7-v0.8",
    ),
    _w(
        "vllm-decoder-prompt",
        r"(?:decoder|encoder) prompt \(length \d+\).*longer than the maximum model length",
        "vLLM engine/llm_engine.py v0.6-v0.10; v1/engine/processor.py, input_processor.py v0.9 to current",
    ),
    _w("vllm-too-long-to-fit", r"too long to fit into the model", "vLLM engine/llm_engine.py, v0.6"),
    _w("vllm-max-tokens-min", r"max_(?:completion_)?tokens must be at least 1", "vLLM sampling_params.py"),
    _w("vllm-context-length", r"maximum context length is \d+", "vLLM serving_engine.py, v0.2 to current"),
    _w("sglang-context-length", r"longer than the model's context length", "SGLang OpenAI server"),
    _w("openai-code", r"context_length_exceeded", "OpenAI API error code"),
    _w("tgi-max-new-tokens", r"max_new_tokens\W+must be <= \d+", "Hugging Face TGI"),
    _w("context-length", r"context length", "NeMo Gym 0.4.0 vllm_model (generic)"),
)


def _text(body: Any) -> str:
    if isinstance(body, (bytes, bytearray)):
        return body.decode("utf-8", "replace")
    if isinstance(body, str):
        return body
    try:
        return json.dumps(body)
    except (TypeError, ValueError):
        return str(body)


def classify(status: int | None, body: Any) -> Wording | None:
    """The table row an upstream error answer matches, or None when it is not a context overflow
    (``status`` must be one of :data:`STATUSES`; ``body`` is the parsed JSON, text or bytes)."""
    if status not in STATUSES:
        return None
    text = _text(body)
    return next((w for w in WORDINGS if w.pattern.search(text)), None)


def message_of(body: Any, limit: int = 500) -> str:
    """The upstream's error message (``message`` or ``error.message``), else the body as text."""
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        if isinstance(inner.get("message"), str):
            return inner["message"][:limit]
    return _text(body)[:limit]
