"""Tool calls left as text in a final answer: the endpoint's tool-call parser did not parse them.

When vLLM's tool-call parser cannot parse what the model wrote (extra data, a missing ``}``, a
parser that does not match the chat template), the completion ends ``finish_reason: stop`` with
no ``tool_calls`` and the raw call in ``content`` (case C41). An agent that takes that as the
final answer scores a call that never ran. :func:`unparsed_tool_calls` finds such calls in the text
of a final message of a row that offers tools:

- the markup of a chat template's tool-call block, :data:`MARKERS` (Hermes/Qwen ``<tool_call>``,
  Phi/Granite ``<|tool_call|>``, Mistral ``[TOOL_CALLS]``, Llama 3 ``<|python_tag|>``, DeepSeek
  ``<｜tool▁calls▁begin｜>``, Kimi ``<|tool_calls_section_begin|>``);
- a bare JSON object ``{"name": <an offered tool>, "arguments": ...}`` (or ``"parameters"``).

Text is model output: only the first :data:`SCAN_CHARS` characters are read, and only the first
:data:`MAX_CANDIDATES` objects that start like a call of an offered tool are parsed.
"""

from __future__ import annotations

import json
import re

MARKERS = (
    "<tool_call>",
    "<|tool_call|>",
    "[TOOL_CALLS]",
    "<|python_tag|>",
    "<｜tool▁calls▁begin｜>",
    "<|tool_calls_section_begin|>",
)
SCAN_CHARS = 200_000
MAX_CANDIDATES = 32
_DECODER = json.JSONDecoder()


def unparsed_tool_calls(text: str, offered: list[str]) -> int:
    """How many tool calls ``text`` (a final answer) holds as text: each marker occurrence, else
    each bare JSON call of an ``offered`` tool; 0 when the row offers no tool."""
    if not offered or not text:
        return 0
    text = text[:SCAN_CHARS]
    marked = sum(text.count(m) for m in MARKERS)
    if marked:
        return marked
    names = "|".join(re.escape(n) for n in offered)
    found = 0
    candidates = re.finditer(r'\{\s*"name"\s*:\s*"(?:' + names + r')"', text)
    for _, match in zip(range(MAX_CANDIDATES), candidates, strict=False):
        try:
            value, _ = _DECODER.raw_decode(text, match.start())
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict) and ("arguments" in value or "parameters" in value):
            found += 1
    return found
