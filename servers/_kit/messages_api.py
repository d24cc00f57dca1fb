"""Anthropic's Messages API on a Responses model server: ``POST /v1/messages`` (NeMo Gym 0.7.0
``nemo_gym/base_responses_api_model.py`` ``messages``: every model server speaks it by mapping
Messages <-> Responses around its own ``/v1/responses``; Anthropic's Messages API for the shapes).

Request (:func:`to_responses_request`): ``system`` (a string or text blocks) -> ``instructions``;
each message's string content or blocks -> input items (``text``/``image`` blocks of a turn ->
one message, ``tool_use`` -> ``function_call``, ``tool_result`` -> ``function_call_output``,
``thinking`` -> ``reasoning``); ``max_tokens`` -> ``max_output_tokens``; ``temperature``,
``top_p``; ``tools`` (``input_schema``) -> function tools; ``tool_choice`` ``auto``/``none``/
``any`` (-> ``required``)/``tool``. A block of another type is a ``ValueError`` naming it.

Answer (:func:`to_message`): reasoning -> ``thinking`` blocks, text -> ``text``, function calls ->
``tool_use`` (arguments parsed; unparseable arguments are kept as ``{"_raw": text}``, since
model output is never trusted to be JSON); ``stop_reason`` ``max_tokens`` (incomplete), ``tool_use``
or ``end_turn``; ``usage`` ``input_tokens``/``output_tokens``. The Responses id is reused, as Gym
does, so an id a client kept names the served answer. :func:`message_events` is its SSE stream
(``message_start``, per block ``content_block_start``/``_delta``/``_stop``, ``message_delta``,
``message_stop``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any


def _tool_result_output(content: Any) -> Any:
    if isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in content):
        return "\n".join(b.get("text", "") for b in content)
    return content if isinstance(content, str) else json.dumps(content)


def _image_part(block: dict) -> dict:
    source = block.get("source") or {}
    if source.get("type") != "base64":
        raise ValueError("an image block must carry a base64 source")
    return {
        "type": "input_image",
        "image_url": f"data:{source.get('media_type')};base64,{source.get('data')}",
        "detail": "auto",
    }


def _items_of(role: str, content: Any) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "message", "role": role, "content": content}]
    items: list[dict] = []
    parts: list[dict] = []

    def flush() -> None:
        if parts:
            items.append({"type": "message", "role": role, "content": list(parts)})
            parts.clear()

    text_kind = "output_text" if role == "assistant" else "input_text"
    for block in content or []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": text_kind, "text": block.get("text", "")})
        elif kind == "image":
            parts.append(_image_part(block))
        elif kind == "tool_use":
            flush()
            items.append(
                {
                    "type": "function_call",
                    "call_id": block["id"],
                    "id": block["id"],
                    "name": block["name"],
                    "arguments": json.dumps(block.get("input") or {}),
                    "status": "completed",
                }
            )
        elif kind == "tool_result":
            flush()
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": block["tool_use_id"],
                    "output": _tool_result_output(block.get("content", "")),
                }
            )
        elif kind == "thinking":
            flush()
            items.append(
                {
                    "type": "reasoning",
                    "id": f"rs_{uuid.uuid4().hex}",
                    "summary": [{"type": "summary_text", "text": block.get("thinking", "")}],
                }
            )
        else:
            raise ValueError(f"a Messages content block of type {kind!r} has no Responses form")
    flush()
    return items


def _tool_choice(choice: Any) -> Any:
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, dict) else choice
    mapping = {"auto": "auto", "none": "none", "any": "required"}
    if kind in mapping:
        return mapping[kind]
    if kind == "tool":
        return {"type": "function", "name": choice["name"]}
    raise ValueError(f"tool_choice {choice!r} has no Responses form")


def to_responses_request(body: dict) -> dict:
    """A Responses request for a Messages request ``body``; ``ValueError`` for what has no form."""
    if not isinstance(body.get("messages"), list):
        raise ValueError("'messages' must be a list")
    items: list[dict] = []
    for message in body["messages"]:
        items += _items_of(message.get("role", "user"), message.get("content", ""))
    params: dict[str, Any] = {"input": items}
    system = body.get("system")
    if system:
        params["instructions"] = (
            system
            if isinstance(system, str)
            else "\n".join(b.get("text", "") for b in system if isinstance(b, dict) and b.get("type") == "text")
        )
    for src, dst in (
        ("max_tokens", "max_output_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("metadata", "metadata"),
    ):
        if body.get(src) is not None:
            params[dst] = body[src]
    if body.get("tools"):
        params["tools"] = [
            {
                "type": "function",
                "name": t["name"],
                "description": t.get("description"),
                "parameters": t.get("input_schema") or {"type": "object", "properties": {}},
            }
            for t in body["tools"]
        ]
    choice = _tool_choice(body.get("tool_choice"))
    if choice is not None:
        params["tool_choice"] = choice
    return params


def _input_of(arguments: str) -> Any:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


def to_message(response: dict, model: str) -> dict:
    """The Messages answer for a Responses object (module doc)."""
    content: list[dict] = []
    tool_use = False
    for item in response.get("output") or []:
        kind = item.get("type")
        if kind == "reasoning":
            content += [
                {"type": "thinking", "thinking": s.get("text", ""), "signature": ""} for s in item.get("summary") or []
            ]
        elif kind == "message":
            content += [
                {"type": "text", "text": p.get("text", p.get("refusal", ""))} for p in item.get("content") or []
            ]
        elif kind == "function_call":
            tool_use = True
            content.append(
                {
                    "type": "tool_use",
                    "id": item.get("call_id") or item.get("id"),
                    "name": item["name"],
                    "input": _input_of(item.get("arguments", "")),
                }
            )
    if response.get("status") == "incomplete":
        stop = "max_tokens"
    else:
        stop = "tool_use" if tool_use else "end_turn"
    usage = response.get("usage") or {}
    out = {
        "id": response.get("id") or f"msg_{uuid.uuid4().hex}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": usage.get("input_tokens", 0), "output_tokens": usage.get("output_tokens", 0)},
    }
    for key in ("context_overflow", "aborted_calls"):
        if response.get(key):
            out[key] = response[key]
    return out


def _sse(kind: str, data: dict) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


def message_events(message: dict) -> Iterator[str]:
    """The Messages SSE stream of a complete Messages answer."""
    usage = message.get("usage") or {}
    yield _sse(
        "message_start",
        {
            "message": {
                **message,
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": usage.get("input_tokens", 0), "output_tokens": 0},
            }
        },
    )
    for index, block in enumerate(message.get("content") or []):
        kind = block["type"]
        empty = {
            "text": {"type": "text", "text": ""},
            "thinking": {"type": "thinking", "thinking": "", "signature": ""},
            "tool_use": {"type": "tool_use", "id": block.get("id"), "name": block.get("name"), "input": {}},
        }[kind]
        yield _sse("content_block_start", {"index": index, "content_block": empty})
        if kind == "text":
            delta = {"type": "text_delta", "text": block["text"]}
        elif kind == "thinking":
            delta = {"type": "thinking_delta", "thinking": block["thinking"]}
        else:  # tool_use: any other kind has no `empty` block above
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield _sse("content_block_delta", {"index": index, "delta": delta})
        yield _sse("content_block_stop", {"index": index})
    yield _sse(
        "message_delta",
        {
            "delta": {"stop_reason": message.get("stop_reason"), "stop_sequence": None},
            "usage": {"output_tokens": usage.get("output_tokens", 0)},
        },
    )
    yield _sse("message_stop", {})
