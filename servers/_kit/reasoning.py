"""Splitting a model's reasoning from its answer when they come in one text (``<think>`` tags).

With ``uses_reasoning_parser: true`` the policy model server returns reasoning as Responses
``reasoning`` items, never as part of the answer the grader reads (docs/rollouts.md,
"Reasoning"). vLLM with a reasoning parser sends it in ``reasoning_content`` (``reasoning``
from v0.10 on); a model served without one leaves the tags in ``content``, in one of these shapes,
all handled by :func:`split_think`:

- ``<think>R</think>A``: an opening and a closing tag (any number of pairs);
- ``R</think>A``: only a closing tag, because the chat template put ``<think>`` into the prompt
  (Qwen3, DeepSeek-R1 templates);
- ``<think>R`` with no closing tag: the answer never came (the model stopped or hit ``length``
  while thinking), so all of it is reasoning and the answer is empty.

Gym 0.4.0 (``nemo_gym/responses_converter.py``, ``THINK_TAG_PATTERN``) splits only complete
pairs, so the last two shapes reach the grader as the answer.
"""

from __future__ import annotations

import re

OPEN, CLOSE = "<think>", "</think>"
PAIR_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def split_think(text: str) -> tuple[list[str], str]:
    """``(reasoning texts, answer)`` of a ``<think>``-tagged string (see the module docstring)."""
    thoughts = PAIR_RE.findall(text)
    rest = PAIR_RE.sub("", text)
    if CLOSE in rest:
        head, _, rest = rest.partition(CLOSE)
        thoughts.insert(0, head.replace(OPEN, ""))
    if OPEN in rest:
        rest, _, tail = rest.partition(OPEN)
        thoughts.append(tail)
    return [t for t in thoughts if t], rest
