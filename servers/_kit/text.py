"""Model output made into text: what no strict encoder accepts is replaced by U+FFFD and counted.

A policy's output is untrusted and need not be text (docs/rollouts.md, "Model output that is not
text"): a JSON escape split in the middle of a UTF-16 pair (``"\\ud83d"``) decodes to a lone
surrogate, which ``json.dumps(ensure_ascii=False).encode("utf-8")``, orjson and pydantic's JSON
serializer all refuse (an HTTP 500 where the reward was right), and NUL and the other C0 control
characters (tab, newline and carriage return aside) break JSON parsers in strict mode, databases
and terminals. :func:`repaired` replaces each such code point by U+FFFD (``\\ufffd``) in every
string of a JSON value, keys included, and says how many it replaced; the model server counts them
per call (``repaired_text`` on its answer), the agent per row.

The daemon uses this module too (``gym_runtime`` imports ``servers._kit.text``): one repair, one
count, wherever model output enters.
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"
NOT_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")


def repaired_str(text: str) -> tuple[str, int]:
    """``text`` with every lone surrogate, NUL and C0 control character except ``\\t \\n \\r``
    replaced by U+FFFD, and how many were replaced."""
    return NOT_TEXT.subn(REPLACEMENT, text)


def repaired(value: Any) -> tuple[Any, int]:
    """A JSON value (dicts, lists, strings, numbers, bools, None) with :func:`repaired_str` applied
    to every string, keys included; containers are changed in place and returned. Iterative, so a
    value nested as deep as any parser allows is no :class:`RecursionError`."""
    if isinstance(value, str):
        return repaired_str(value)
    total = 0
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            for i, item in enumerate(node):
                if isinstance(item, str):
                    if NOT_TEXT.search(item):
                        node[i], n = repaired_str(item)
                        total += n
                elif isinstance(item, (list, dict)):
                    stack.append(item)
        elif isinstance(node, dict):
            if any(isinstance(k, str) and NOT_TEXT.search(k) for k in node):
                items = list(node.items())
                node.clear()
                for k, v in items:
                    if isinstance(k, str):
                        k, n = repaired_str(k)
                        total += n
                    node[k] = v
            for k, item in node.items():
                if isinstance(item, str):
                    if NOT_TEXT.search(item):
                        node[k], n = repaired_str(item)
                        total += n
                elif isinstance(item, (list, dict)):
                    stack.append(item)
    return value, total
