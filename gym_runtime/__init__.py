"""gym-runtime: bring up NeMo Gym reward environments (validate, build venvs, sandbox, supervise, serve).

Public Python API: :class:`gym_runtime.Runtime` (imported lazily, so ``import gym_runtime.errors``,
the stub model and the console script's first import stay light: this module imports nothing).
"""

from __future__ import annotations

__all__ = ["Runtime"]


def __getattr__(name: str) -> object:
    if name == "Runtime":
        from gym_runtime.runtime.api import Runtime

        return Runtime
    raise AttributeError(f"module 'gym_runtime' has no attribute {name!r}")
