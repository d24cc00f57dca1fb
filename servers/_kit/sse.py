"""Server-sent events made from a complete answer: ``stream: true`` on ``/v1/responses`` and
``/v1/chat/completions`` (NeMo Gym 0.7.0 ``nemo_gym/responses_streaming.py`` and
``nemo_gym/chat_streaming.py`` do the same: the upstream call is not streamed, its answer is
re-emitted as the event stream a streaming client parses; OpenAI's Responses and Chat Completions
streaming formats).

- :func:`responses_events`: ``response.created``, ``response.in_progress``, per output item
  ``response.output_item.added``, its content (``response.content_part.added``,
  ``response.output_text.delta`` / ``.done``, ``response.content_part.done``; for a function call
  ``response.function_call_arguments.delta`` / ``.done``; for reasoning
  ``response.reasoning_summary_text.delta`` / ``.done``), ``response.output_item.done``, then
  ``response.completed`` (``response.incomplete`` for an incomplete one), each with its
  ``sequence_number``.
- :func:`failed_events`: a stream that ends in ``response.failed`` with the error, for a failure
  after the client asked for a stream (a broken stream would say less).
- :func:`chat_chunks`: ``chat.completion.chunk`` objects (role, content, tool calls, the finish
  reason, usage) and ``data: [DONE]``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator

MEDIA_TYPE = "text/event-stream"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _event(kind: str, seq: int, **data: object) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': seq, **data})}\n\n"


def _item_events(item: dict, index: int, seq: int) -> Iterator[tuple[str, dict]]:
    """``(event type, fields)`` of one output item, between its added and done events."""
    kind, item_id = item.get("type"), item.get("id")
    where = {"item_id": item_id, "output_index": index}
    if kind == "message":
        for c, part in enumerate(item.get("content") or []):
            text = part.get("text", "")
            yield "response.content_part.added", {**where, "content_index": c, "part": {**part, "text": ""}}
            if text:
                yield "response.output_text.delta", {**where, "content_index": c, "delta": text, "logprobs": []}
            yield "response.output_text.done", {**where, "content_index": c, "text": text, "logprobs": []}
            yield "response.content_part.done", {**where, "content_index": c, "part": part}
    elif kind == "function_call":
        arguments = item.get("arguments", "")
        if arguments:
            yield "response.function_call_arguments.delta", {**where, "delta": arguments}
        yield "response.function_call_arguments.done", {**where, "arguments": arguments}
    elif kind == "reasoning":
        for s, part in enumerate(item.get("summary") or []):
            text = part.get("text", "")
            yield (
                "response.reasoning_summary_part.added",
                {**where, "summary_index": s, "part": {"type": "summary_text", "text": ""}},
            )
            yield "response.reasoning_summary_text.delta", {**where, "summary_index": s, "delta": text}
            yield "response.reasoning_summary_text.done", {**where, "summary_index": s, "text": text}
            yield "response.reasoning_summary_part.done", {**where, "summary_index": s, "part": part}


def responses_events(response: dict) -> Iterator[str]:
    """The Responses event stream of a complete Responses object (module doc)."""
    seq = 0
    opening = {**copy.deepcopy(response), "status": "in_progress", "output": [], "usage": None}
    for kind in ("response.created", "response.in_progress"):
        yield _event(kind, seq, response=opening)
        seq += 1
    for index, item in enumerate(response.get("output") or []):
        empty = {
            **item,
            **({"content": []} if item.get("type") == "message" else {}),
            **({"arguments": ""} if item.get("type") == "function_call" else {}),
            "status": "in_progress",
        }
        yield _event("response.output_item.added", seq, output_index=index, item=empty)
        seq += 1
        for kind, fields in _item_events(item, index, seq):
            yield _event(kind, seq, **fields)
            seq += 1
        yield _event("response.output_item.done", seq, output_index=index, item=item)
        seq += 1
    final = "response.incomplete" if response.get("status") == "incomplete" else "response.completed"
    yield _event(final, seq, response=response)


def failed_events(message: str, kind: str = "server_error") -> Iterator[str]:
    """A stream that fails at once: ``response.created`` then ``response.failed`` with ``message``."""
    shell = {"id": "resp_failed", "object": "response", "status": "in_progress", "output": []}
    yield _event("response.created", 0, response=shell)
    yield _event(
        "response.failed", 1, response={**shell, "status": "failed", "error": {"code": kind, "message": message}}
    )


def chat_chunks(completion: dict) -> Iterator[str]:
    """The Chat Completions chunk stream of a complete chat completion (first choice)."""
    base = {
        "id": completion.get("id"),
        "object": "chat.completion.chunk",
        "created": completion.get("created"),
        "model": completion.get("model"),
    }
    choice = completion["choices"][0]
    message = choice.get("message") or {}

    def chunk(delta: dict, finish: str | None = None, **extra: object) -> str:
        body = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra}
        return f"data: {json.dumps(body)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    for key in ("reasoning", "reasoning_content"):
        if message.get(key):
            yield chunk({key: message[key]})
    if message.get("content"):
        yield chunk({"content": message["content"]})
    for i, call in enumerate(message.get("tool_calls") or []):
        yield chunk(
            {
                "tool_calls": [
                    {"index": i, "id": call.get("id"), "type": "function", "function": dict(call.get("function") or {})}
                ]
            }
        )
    yield chunk({}, choice.get("finish_reason") or "stop")
    if completion.get("usage"):
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': completion['usage']})}\n\n"
    yield "data: [DONE]\n\n"
