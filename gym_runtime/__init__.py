"""gym-runtime: bring up NeMo Gym reward environments (validate, build venvs, sandbox, supervise, serve).

Public Python API: :class:`gym_runtime.Runtime` (imported lazily, so ``import gym_runtime.errors``
and the stub model stay light).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Runtime"]


def __getattr__(name: str) -> Any:
    if name == "Runtime":
        from gym_runtime.runtime import Runtime

        return Runtime
    raise AttributeError(f"module 'gym_runtime' has no attribute {name!r}")
