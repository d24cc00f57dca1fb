"""Apply edits to a running environment: restart chosen servers, merge the config again (``dry-run --watch``).

A requested restart is not a crash (docs/rollouts.md, "Watching"): :func:`restart` clears each
server's restart count and start-up history, stops a running one and spawns it again with its
spec as it is now (:func:`gym_runtime.supervise.rebind.respawn`), spawns one that failed for good,
and leaves one waiting out a crash-restart backoff to its pending spawn. It returns once each is
ready or failed for good. A server that cannot start after an edit (a syntax error in its app)
fails the way the supervisor fails any server (two identical start-up exits, case C29) and its
error block is said on the progress lines; the environment stays up because the watch runs with
``keep_going``. Once every member is ready again, a supervisor that had failed is ready again.

:func:`remerge` merges the package's configuration again with the job's policy values (the same
stub model URL), refuses a change the running environment cannot take
(``GR-CONFIG-WATCH-RESTART``: an instance added or removed, another implementation or server
directory, another explicit port or host), gives the sandbox-provider blocks what the start gave
them on this host (:func:`gym_runtime.task_sandboxes.bringup.choose_providers`), gives every server its new ``NEMO_GYM_CONFIG_DICT``
(:meth:`gym_runtime.placement.local.LocalPlacement.respec`) and returns the instances to restart:
those whose block changed, or all of them when a key outside the instance blocks changed (every
server reads the whole config).
"""

from __future__ import annotations

from typing import Any

from gym_runtime.config import MergedConfig
from gym_runtime.errors import ConfigError
from gym_runtime.policy import values as job_policy
from gym_runtime.supervise import env_limit
from gym_runtime.supervise.member import FAILED, READY, RESTARTING, STARTING, STOPPING, Event
from gym_runtime.supervise.rebind import respawn


async def restart(sup: Any, names: list[str]) -> dict[str, str | None]:
    """Restart the members ``names`` of :class:`~gym_runtime.supervise.supervisor.Supervisor`
    ``sup`` (module doc) and wait until each is ready or failed for good. Returns name -> None
    (ready) or its error message (failed; its block was already said). Raises
    :class:`~gym_runtime.supervise.interrupted.StartInterrupted` when the environment stops meanwhile."""
    sup.phase = f"restarting {', '.join(names)} after an edit"
    for name in names:
        m = sup.members[name]
        m.restarts, m.node_losses, m.startup_exit, m.wedged = 0, 0, None, None
        if m.status == STOPPING or m.status == RESTARTING:
            continue  # a restart already under way: its spawn reads the spec as it is now
        if m.proc is not None and m.proc.poll() is None:
            respawn(sup, m)
        else:
            m.status, m.error = STARTING, None
            sup.post(Event("spawn", name))
    await sup.until(lambda: all(sup.members[n].status in (READY, FAILED) for n in names))
    if sup.state == "failed" and all(m.status == READY for m in sup.members.values()):
        sup.state, sup.failure = "ready", None
    if sup.state == "ready":
        sup.phase = "ready"
    return {n: sup.members[n].error if sup.members[n].status == FAILED else None for n in names}


async def remerge(env: Any) -> list[str]:
    """Merge ``env``'s (:class:`~gym_runtime.runtime.bringup.Environment`) package configuration
    again and hand it to its servers' specs; returns the server instances to restart (module doc).
    Raises what :func:`gym_runtime.config.build_config` raises, or :class:`ConfigError`
    ``GR-CONFIG-WATCH-RESTART``; on any error the running environment is left as it was."""
    old: MergedConfig = env.merged
    new, _ = await job_policy.configure(
        env.req.package,
        env.req.overrides,
        env.req.policy,
        lambda msg: None,
        env.settings,
        job_config=env.req.job_config,
        stub_url=env.stub_url,
    )
    _check_compatible(old, new)
    from gym_runtime.task_sandboxes.bringup import choose_providers

    choose_providers(new, env.settings, lambda msg: None, gate=env.placement.kind == "local")
    env_limit.check_config_sizes(new)
    instances = set(new.instances)
    outside = {k for k in (*old.data, *new.data) if k not in instances}
    if any(old.data.get(k) != new.data.get(k) for k in outside):
        changed = list(new.instances)
    else:
        changed = [n for n in new.instances if old.data.get(n) != new.data.get(n)]
    from gym_runtime.rollouts.routing import Routing

    env.merged, env._routing = new, Routing.from_config(new)
    env.placement.respec()
    return changed


def _check_compatible(old: MergedConfig, new: MergedConfig) -> None:
    """Raise ``GR-CONFIG-WATCH-RESTART`` naming each instance the running environment cannot follow."""
    problems = [f"{n!r} was added" for n in new.instances if n not in old.instances]
    problems += [f"{n!r} was removed" for n in old.instances if n not in new.instances]
    for n in set(old.instances) & set(new.instances):
        a, b = old.instances[n], new.instances[n]
        for what, x, y in (
            ("implementation", f"{a.server_type}/{a.implementation}", f"{b.server_type}/{b.implementation}"),
            ("server directory", a.server_dir.path, b.server_dir.path),
            ("entrypoint", a.entrypoint, b.entrypoint),
            ("port", a.port or "a free port", b.port or "a free port"),
            ("host", a.host or "the default", b.host or "the default"),
        ):
            if x != y:
                problems.append(f"{n!r} changed its {what} ({x} -> {y})")
    if problems:
        raise ConfigError(
            "the config change cannot be applied to the running environment: " + "; ".join(problems),
            code="GR-CONFIG-WATCH-RESTART",
            hint="stop with Ctrl-C and start dry-run --watch again "
            "to bring the environment up with it (the running servers keep the previous config)",
        )
