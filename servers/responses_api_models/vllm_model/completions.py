"""``use_completions_api``: the upstream call goes to vLLM's ``/v1/completions`` instead of
``/v1/chat/completions`` (NeMo Gym 0.7.0 ``responses_api_models/vllm_model/app.py``,
``_chat_completions_via_completions_api``); the server's own endpoints keep their shapes.

- Raw mode (``render_chat_template: false``): the request must be one user message, optionally
  after one system message, of text only; their texts, joined by a blank line, are the prompt.
  Tools, more turns or other content are a ``ValueError`` (answered 422) saying so.
- ``render_chat_template: true``: the endpoint renders its own chat template (vLLM's ``/tokenize``
  with the messages, tools and ``chat_template_kwargs``, ``add_generation_prompt: true``) and the
  token ids are the prompt, so multi-turn requests and tools work. Gym renders with a Hugging Face
  tokenizer in the server instead; the ids are the same ones vLLM's chat endpoint would use.
  Tool calls in the answer are not parsed (there is no tool parser on ``/v1/completions``).
- The answer becomes a chat completion whose message content is the choice's ``text``; with
  token ids on, ``prompt_token_ids`` and ``generation_token_ids`` come from the choice
  (``return_token_ids``) or the ``token_id:<int>`` logprob tokens, checked like the chat path's.
"""

from __future__ import annotations

import time
from typing import Any

# chat fields that /v1/completions takes under the same name
SAME_NAME = (
    "max_tokens",
    "temperature",
    "top_p",
    "n",
    "seed",
    "stop",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "response_format",
    "user",
    "top_k",
    "min_p",
    "repetition_penalty",
)


def _text(message: dict) -> str:
    content = message.get("content")
    role = message.get("role")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("text", "input_text"):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ValueError(f"use_completions_api takes text content only; got a {kind!r} part ({role} message)")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise ValueError(f"use_completions_api takes text content only; got {type(content).__name__} ({role} message)")


def raw_prompt(chat_body: dict) -> str:
    """The prompt of raw mode (module doc); ``ValueError`` for a request it cannot be."""
    if chat_body.get("tools"):
        raise ValueError(
            "use_completions_api with render_chat_template: false takes no tools (there is no "
            "chat template to render them); set render_chat_template: true"
        )
    messages = chat_body.get("messages") or []
    roles = [m.get("role") for m in messages]
    if roles not in (["user"], ["system", "user"]):
        raise ValueError(
            f"use_completions_api with render_chat_template: false takes one user message, optionally "
            f"after one system message; got the roles {roles}: set render_chat_template: true for "
            "conversations"
        )
    return "\n\n".join(_text(m) for m in messages)


def completion_body(
    chat_body: dict, prompt: Any, model: str, token_info: bool, extra_body: dict | None, sampling_overrides: dict | None
) -> dict:
    """The ``/v1/completions`` body for a prepared chat body and its ``prompt`` (text or ids)."""
    out: dict[str, Any] = {"model": model, "prompt": prompt}
    out.update({k: chat_body[k] for k in SAME_NAME if k in chat_body})
    if "max_tokens" not in out and "max_completion_tokens" in chat_body:
        out["max_tokens"] = chat_body["max_completion_tokens"]
    if chat_body.get("top_logprobs") is not None:
        out["logprobs"] = chat_body["top_logprobs"]
    elif chat_body.get("logprobs") is True or token_info:
        out["logprobs"] = 0
    out = {**(extra_body or {}), **out}
    if token_info:
        out.update(return_token_ids=True, return_tokens_as_token_ids=True)
    out.update(sampling_overrides or {})
    return out


def to_chat_completion(completion: dict, model: str) -> dict:
    """A chat completion (first choice) of a ``/v1/completions`` answer; token fields are left on the
    choice (``prompt_token_ids``, ``token_ids``, ``logprobs``) for the caller to check."""
    choice = (completion.get("choices") or [{}])[0]
    message = {"role": "assistant", "content": choice.get("text") or "", "tool_calls": None}
    out = {
        "id": completion.get("id") or "chatcmpl-completions",
        "object": "chat.completion",
        "created": completion.get("created") or int(time.time()),
        "model": completion.get("model") or model,
        "choices": [
            {
                "index": 0,
                "finish_reason": choice.get("finish_reason") or "stop",
                "message": message,
                "text_logprobs": choice.get("logprobs"),
                "token_ids": choice.get("token_ids"),
            }
        ],
        "usage": completion.get("usage"),
    }
    if choice.get("prompt_token_ids") is not None:
        out["prompt_token_ids"] = choice["prompt_token_ids"]
    return out


def logprob_entries(text_logprobs: Any) -> Any:
    """The completions API's ``logprobs`` (``tokens``, ``token_logprobs``) as chat-style entries
    ``[{token, logprob}]`` for :func:`_kit.policy_answers.token_ids`; anything else unchanged."""
    if not isinstance(text_logprobs, dict) or not isinstance(text_logprobs.get("tokens"), list):
        return None
    values = text_logprobs.get("token_logprobs") or []
    return [
        {"token": t, "logprob": values[i] if i < len(values) else None} for i, t in enumerate(text_logprobs["tokens"])
    ]
