"""``Rubric``: a weighted sum of reward functions ``f(completion, answer, **kwargs) -> float``."""

from __future__ import annotations

import inspect
from collections.abc import Callable


class Rubric:
    """``funcs`` with ``weights`` (default 1.0 each); ``score`` returns ``(reward, metrics)``."""

    def __init__(self, funcs: list[Callable] | None = None, weights: list[float] | None = None) -> None:
        self.funcs = list(funcs or [])
        self.weights = list(weights or [1.0] * len(self.funcs))

    async def score(self, completion: list[dict], answer: str, **kwargs) -> tuple[float, dict[str, float]]:
        metrics: dict[str, float] = {}
        total = 0.0
        for func, weight in zip(self.funcs, self.weights):
            value = func(completion=completion, answer=answer, **kwargs)
            if inspect.isawaitable(value):
                value = await value
            metrics[func.__name__] = float(value)
            total += weight * float(value)
        return total, metrics
