"""Server venvs: plan, build, reuse (docs/architecture.md §5).

    plan = plan_venvs(merged, settings, python=None)      # InstallPlan (raises BuildError early)
    venvs = build_venvs(plan, settings, progress=True, cancel=event)   # VenvSet
    venvs.for_instance("acme_math").python                # <venv>/bin/python

The names are imported on first use, so a module that needs only the planner or the preflight
checks (``gym-runtime validate``) does not load the builder and its HTTP client.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_NAMES = {
    "Venv": "build",
    "VenvSet": "build",
    "build_venvs": "build",
    "InstallPlan": "plan",
    "Pin": "plan",
    "VenvPlan": "plan",
    "plan_venvs": "plan",
}

__all__ = ["InstallPlan", "Pin", "Venv", "VenvPlan", "VenvSet", "build_venvs", "plan_venvs"]


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(import_module(f"gym_runtime.venvs.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'gym_runtime.venvs' has no attribute {name!r}")
