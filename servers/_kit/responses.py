"""Responses API <-> Chat Completions, the mapping Gym's vllm_model performs (NeMo Gym 0.4.0 `responses_api_models/vllm_model/app.py`).

Request side (:func:`to_chat_request`): ``input`` items ``message`` / ``reasoning`` /
``function_call`` / ``function_call_output`` become chat messages (a string input is one user
message; consecutive reasoning, text and function calls of the assistant merge into one assistant
message; reasoning is wrapped as ``<think>..</think>``); ``instructions`` and leading
system/developer messages fold into one system message; ``max_output_tokens`` -> ``max_tokens``;
``reasoning.effort`` -> ``reasoning_effort``; tools are flattened to ``{type: function, function}``
without ``strict``. With token information on, token fields of input items ride on the assistant
message.

Response side (:func:`to_response`): the first choice's message becomes output items (reasoning
from ``<think>`` tags in any of the shapes of ``_kit/reasoning.py``, a message if there is text or nothing else, one ``function_call`` per tool
call); token fields go on the last item; usage maps to ``input_tokens`` / ``output_tokens``;
``finish_reason`` ``length`` gives ``status: incomplete`` and ``incomplete_details``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from _kit.reasoning import split_think

TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
_PASSTHROUGH = (
    "temperature",
    "top_p",
    "tool_choice",
    "parallel_tool_calls",
    "user",
    "metadata",
    "seed",
    "top_logprobs",
    "stop",
    "model",
)
_ECHOED = (
    "tool_choice",
    "parallel_tool_calls",
    "tools",
    "temperature",
    "top_p",
    "background",
    "max_output_tokens",
    "max_tool_calls",
    "previous_response_id",
    "prompt",
    "reasoning",
    "service_tier",
    "text",
    "top_logprobs",
    "truncation",
    "metadata",
    "instructions",
    "user",
)


def text_of(content: Any) -> str:
    """Plain text of message content: a string, or a list of ``input_text``/``output_text``/``text`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))


class _Builder:
    def __init__(self, token_info: bool) -> None:
        self.token_info = token_info
        self.messages: list[dict] = []
        self.text = ""
        self.calls: list[dict] = []
        self.open = False
        self.tokens: dict | None = None

    def flush(self) -> None:
        if self.open or self.text or self.calls:
            message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
            if self.calls:
                message["tool_calls"] = self.calls
            if self.token_info and self.tokens:
                message.update(self.tokens)
            self.messages.append(message)
        self.text, self.calls, self.open, self.tokens = "", [], False, None

    def add(self, item: dict) -> None:
        kind = item.get("type") or ("message" if item.get("role") else None)
        role = item.get("role")
        if kind == "message" and role == "assistant":
            self.open = True
            self.text += text_of(item.get("content"))
            for call in item.get("tool_calls") or []:
                self.calls.append({"id": call["id"], "type": "function", "function": dict(call["function"])})
        elif kind == "reasoning":
            self.open = True
            self.text += "".join(f"<think>{s.get('text', '')}</think>" for s in item.get("summary") or [])
        elif kind == "function_call":
            self.open = True
            self.calls.append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]},
                }
            )
        elif kind == "function_call_output":
            self.flush()
            self.messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": text_of(item["output"])})
        elif kind == "message" and role == "tool":
            self.flush()
            self.messages.append({"role": "tool", "tool_call_id": item["tool_call_id"], "content": item.get("content")})
        elif kind == "message" and role in ("user", "system", "developer"):
            self.flush()
            self.messages.append({"role": role, "content": _chat_content(item.get("content"))})
        else:
            raise ValueError(f"input item of type {kind!r} (role {role!r}) has no Chat Completions form")
        if self.token_info and all(f in item for f in TOKEN_FIELDS):
            self.tokens = {f: item[f] for f in TOKEN_FIELDS}


def _chat_content(content: Any) -> Any:
    if not isinstance(content, list):
        return content if content is not None else ""
    parts = []
    for part in content:
        if part.get("type") in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": part.get("text", "")})
        elif part.get("type") == "input_image":
            url = part.get("image_url")
            parts.append(
                {
                    "type": "image_url",
                    "image_url": {
                        "url": url.get("url") if isinstance(url, dict) else url,
                        "detail": part.get("detail", "auto"),
                    },
                }
            )
        else:
            raise ValueError(f"content part of type {part.get('type')!r} has no Chat Completions form")
    return parts


def to_chat_request(body: dict, token_info: bool = False) -> dict:
    """A Chat Completions request for a Responses API request ``body`` (dict in, dict out).

    Raises ``ValueError`` for input items or content parts with no chat form.
    """
    items = body.get("input", [])
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    builder = _Builder(token_info)
    for item in items:
        builder.add(dict(item))
    builder.flush()
    messages = builder.messages
    if body.get("instructions"):
        lead = [body["instructions"]]
        while messages and messages[0]["role"] in ("system", "developer"):
            lead.append(text_of(messages.pop(0)["content"]))
        messages.insert(0, {"role": "system", "content": "\n\n".join(lead)})
    chat: dict[str, Any] = {"messages": messages}
    chat.update({k: body[k] for k in _PASSTHROUGH if body.get(k) is not None})
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    if (body.get("reasoning") or {}).get("effort") is not None:
        chat["reasoning_effort"] = body["reasoning"]["effort"]
    tools = [t for t in body.get("tools") or [] if t.get("type", "function") == "function"]
    if tools:
        chat["tools"] = [
            {"type": "function", "function": {k: v for k, v in t.items() if k not in ("type", "strict")}} for t in tools
        ]
    else:
        chat.pop("tool_choice", None)
        chat.pop("parallel_tool_calls", None)
    return chat


def message_to_items(message: dict, reasoning_parser: bool, token_info: bool) -> list[dict]:
    """Responses output items for one assistant chat message (Gym's ``postprocess_assistant_message_dict``)."""
    text = message.get("content") or ""
    thoughts: list[str] = []
    if reasoning_parser:
        thoughts, text = split_think(text)
    items: list[dict] = []
    if thoughts:
        items.append(
            {
                "id": f"rs_{uuid.uuid4().hex}",
                "type": "reasoning",
                "status": "completed",
                "summary": [{"type": "summary_text", "text": t} for t in thoughts],
            }
        )
    calls = message.get("tool_calls") or []
    if text or not (items or calls):
        items.append(
            {
                "id": f"msg_{uuid.uuid4().hex}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    for call in calls:
        items.append(
            {
                "id": call["id"],
                "call_id": call["id"],
                "type": "function_call",
                "status": "completed",
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
            }
        )
    if token_info and all(message.get(f) is not None for f in TOKEN_FIELDS):
        items[-1].update({f: message[f] for f in TOKEN_FIELDS})
    return items


def to_response(request: dict, completion: dict, reasoning_parser: bool, token_info: bool) -> dict:
    """A Responses API response for ``request`` from a chat ``completion`` (first choice)."""
    choice = completion["choices"][0]
    output = message_to_items(choice["message"], reasoning_parser, token_info)
    usage = None
    if completion.get("usage"):
        u = completion["usage"]
        usage = {
            "input_tokens": u.get("prompt_tokens", 0),
            "output_tokens": u.get("completion_tokens", 0),
            "total_tokens": u.get("total_tokens", 0),
            "input_tokens_details": {
                "cached_tokens": ((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            },
            "output_tokens_details": {
                "reasoning_tokens": ((u.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0)
            },
        }
    incomplete = {"length": {"reason": "max_output_tokens"}, "content_filter": {"reason": "content_filter"}}.get(
        choice.get("finish_reason")
    )
    response = {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": completion.get("created") or int(time.time()),
        "model": request.get("model") or completion.get("model"),
        "output": output,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": incomplete,
        "usage": usage,
        "error": None,
    }
    response.update({k: request.get(k) for k in _ECHOED})
    response["tool_choice"] = request.get("tool_choice") or "auto"
    response["parallel_tool_calls"] = request.get("parallel_tool_calls", True)
    response["tools"] = request.get("tools") or []
    return response
