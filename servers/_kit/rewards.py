"""Is a resources server's ``reward`` usable? A finite number, never NaN, null, a string or absent.

A reward is environment output, so it is untrusted (docs/rollouts.md, "Rewards"). Gym 0.4.0's
``simple_agent`` validates the verify answer with pydantic's ``reward: float``, which turns the
string ``"1"`` into 1.0, lets NaN through (and then fails to serialise it) and answers a bare 500
for null; here each of those is one error naming the resources server and the value.
"""

from __future__ import annotations

import math
from typing import Any


def reward_problem(answer: Any) -> str | None:
    """What is wrong with the ``reward`` of a ``/verify`` answer, or None when it is a finite number."""
    if not isinstance(answer, dict):
        return f"the answer is not a JSON object (got {type(answer).__name__})"
    if "reward" not in answer:
        return "the answer has no 'reward' field"
    value = answer["reward"]
    if value is None:
        return "reward is null"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"reward is {type(value).__name__} {shown(value)}, not a number"
    if not math.isfinite(value):
        return f"reward is {shown(value)}, not a finite number"
    return None


def shown(value: Any, limit: int = 80) -> str:
    """``value`` for a message: NaN/Infinity spelled as JSON does, long text cut."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
