"""The stub model's tokenizer and chat template (deterministic, no vocabulary file).

Text is cut into pieces (a run of word characters, a run of whitespace, or one other
character); a piece's id is ``FIRST_ID + crc32(piece) % VOCAB``. Special markers of the chat
template have fixed small ids. This is enough for the vLLM token fields (``prompt_token_ids``,
``token_ids``, ``logprobs.content[].token = "token_id:<id>"``, ``/tokenize``) to be consistent:
the same text always yields the same ids, and ``/tokenize`` on a chat request yields exactly the
prompt ids the completion reports.
"""

from __future__ import annotations

import json
import re
import zlib
from typing import Any

SPECIAL_TOKENS = {"<|im_start|>": 1, "<|im_end|>": 2, "<tool_call>": 3, "</tool_call>": 4}
FIRST_ID = 1000
VOCAB = 100_000
_SPECIAL_RE = "|".join(re.escape(t) for t in SPECIAL_TOKENS)
_PIECE_RE = re.compile(rf"({_SPECIAL_RE})|\w+|\s+|[^\w\s]")


def tokenize(text: str) -> tuple[list[int], list[str]]:
    """Cut ``text`` into pieces; returns ``(ids, pieces)`` of equal length."""
    ids: list[int] = []
    pieces: list[str] = []
    for match in _PIECE_RE.finditer(text):
        piece = match.group(0)
        pieces.append(piece)
        ids.append(SPECIAL_TOKENS.get(piece, FIRST_ID + zlib.crc32(piece.encode()) % VOCAB))
    return ids, pieces


def content_text(content: Any) -> str:
    """Plain text of a chat message ``content`` (string, list of text parts, or None)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def render_chat(messages: list[dict], tools: list[dict] | None, add_generation_prompt: bool = True) -> str:
    """Render a chat request into one prompt string (a ChatML-like template).

    Tools are listed as JSON in a leading system block; assistant tool calls are rendered as
    ``<tool_call>{...}</tool_call>``; the generation prompt opens an assistant turn.
    """
    parts: list[str] = []
    if tools:
        specs = json.dumps([t.get("function", t) for t in tools], sort_keys=True)
        parts.append(f"<|im_start|>system\n# Tools\n{specs}<|im_end|>\n")
    for message in messages:
        role = message.get("role", "user")
        body = content_text(message.get("content"))
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            body += render_tool_call(function.get("name", ""), function.get("arguments", ""))
        parts.append(f"<|im_start|>{role}\n{body}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def render_tool_call(name: str, arguments: str) -> str:
    """The raw generated text of one tool call (what a model emits before vLLM's parser)."""
    return f'<tool_call>{{"name": {json.dumps(name)}, "arguments": {arguments}}}</tool_call>'
