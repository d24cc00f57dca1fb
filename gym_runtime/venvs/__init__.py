"""Server venvs: plan, build, reuse (DESIGN.md §5; issue 3).

    plan = plan_venvs(merged, settings, python=None)      # InstallPlan (raises BuildError early)
    venvs = build_venvs(plan, settings, progress=True, cancel=event)   # VenvSet
    venvs.for_instance("acme_math").python                # <venv>/bin/python
"""

from gym_runtime.venvs.build import Venv, VenvSet, build_venvs
from gym_runtime.venvs.plan import InstallPlan, Pin, VenvPlan, plan_venvs

__all__ = ["InstallPlan", "Pin", "Venv", "VenvPlan", "VenvSet", "build_venvs", "plan_venvs"]
