"""Rebuild the venvs of running servers and move the servers onto them (``dry-run --watch``, docs/rollouts.md).

:func:`rebuild` plans the environment's venvs again with the planner and the builder the start
uses (:func:`gym_runtime.venvs.plan_venvs`, :func:`gym_runtime.venvs.build_venvs`: uv, stage 1
and, for an agent or resources server of a package with ``wheels/``, the offline stage 2) and
builds only the venvs of the instances it is given. It touches no running process: a venv is
built in a temporary directory and renamed into place once ready (docs/architecture.md §5), so
the old venv keeps serving meanwhile and a failed or cancelled build leaves nothing; the build is
recorded for ``gym-runtime logs`` as the start's is. It returns the instances whose venv is now
another than the one they run on.

:func:`reseat` then gives each of those its new venv from its next start on
(:meth:`gym_runtime.placement.local.LocalPlacement.reseat`) and places the bytecode the store
holds for it; the caller restarts them (:func:`gym_runtime.runtime.reload.restart`). A server
that uses Ray is not moved (``GR-BUILD-WATCH-RAY``) unless the environment joined a Ray cluster
or each server starts its own in its sandbox (:mod:`gym_runtime.ray.watch`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gym_runtime.errors import BuildError
from gym_runtime.ray import watch as watch_ray


async def rebuild(env: Any, names: list[str], cancel: threading.Event) -> dict[str, Any]:
    """Build the venvs of server instances ``names`` of the running
    :class:`~gym_runtime.runtime.bringup.Environment` ``env`` from their install files as they
    are now (module doc); ``cancel`` stops the build (uv killed within about two seconds). Returns
    instance -> its new :class:`~gym_runtime.venvs.build.Venv` for each instance of ``names`` whose
    venv changed ({} when every one runs on the venv its inputs give). Raises what
    :func:`~gym_runtime.venvs.plan_venvs` and :func:`~gym_runtime.venvs.build_venvs` raise
    (:class:`BuildError`, ``GR-BUILD-CANCELLED`` once ``cancel`` is set) and ``GR-BUILD-WATCH-RAY``."""
    from gym_runtime.venvs import build_venvs, plan_venvs
    from gym_runtime.venvs.record import record_build

    started = time.time()
    plan = await asyncio.to_thread(plan_venvs, env.merged, env.settings, env.req.python)
    mine = {n: plan.by_instance[n] for n in names}
    plan = replace(plan, venvs=tuple(v for v in plan.venvs if v.digest in mine.values()), by_instance=mine)
    try:
        venvs = await asyncio.to_thread(build_venvs, plan, env.settings, cancel=cancel)
    except BuildError as e:
        record_build(env.settings.home, names, started, error=e)
        raise
    record_build(env.settings.home, names, started, venvs=venvs)
    pythons = env.placement.pythons
    changed = {n: venvs.for_instance(n) for n in names if Path(venvs.for_instance(n).python) != pythons.get(n)}
    watch_ray.check_rebuilt(env, changed)
    return changed


async def reseat(env: Any, changed: dict[str, Any]) -> None:
    """Give each server of ``changed`` (instance -> new :class:`~gym_runtime.venvs.build.Venv`) its
    new venv from its next start on, with the bytecode the store holds for that venv; the running
    processes are not touched. The caller restarts them right after, with no wait in between (a
    running harvest must not take the old process, still ready, for the new one); once they have
    restarted, :func:`learn` compiles what they import into the new venvs."""
    await env.bytecode.prepare([Path(v.python) for v in changed.values()])
    for name, venv in changed.items():  # from here to the restart: no await
        env.placement.reseat(name, venv)


def learn(env: Any) -> None:
    """Compile what the restarted servers import into their venvs' shared bytecode cache (in the
    background, as after the start: :meth:`~gym_runtime.venvs.env_bytecode.EnvironmentBytecode.learn`)."""
    env.bytecode.learn(env.supervisor.ready_or_gone)
