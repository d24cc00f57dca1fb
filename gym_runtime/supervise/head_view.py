"""What the head server answers about one :class:`~gym_runtime.runtime.bringup.Environment`, in
every phase (docs/architecture.md §7.3): it serves from right after the config is read, so during
venv builds ``/server_instances``, ``/health`` and ``/servers/{name}/logs`` say what each server is
doing (its venv build's state, ``Environment.build_state``) before the supervisor has a member
for it; ``/health`` also carries the effective egress allowlist.
"""

from __future__ import annotations

from typing import Any

from gym_runtime.gym_release import GymRelease


def instances(env: Any) -> list[dict[str, Any]]:
    """``/server_instances``: every member's snapshot, and during start-up each configured server
    that has none yet, with its venv build's state as ``status`` (a server placed on Ray nodes has
    a member per replica, each naming its ``instance``: docs/scale-out.md)."""
    members = env.supervisor.members
    rows = [m.snapshot() for m in members.values()]
    have = {m.info.get("instance", m.name) for m in members.values()}
    for name, inst in env.merged.instances.items() if env.merged else ():
        if name not in have:
            rows.append(
                {
                    "name": name,
                    "kind": "server",
                    "server_type": inst.server_type,
                    "implementation": inst.implementation,
                    "status": env.build_state.get(name, "pending"),
                    "url": None,
                    "pid": None,
                    "restarts": 0,
                }
            )
    return rows


def probe_routes(release: GymRelease | None) -> dict[str, tuple[str, ...]]:
    """The head server's probe routes for the Gym release line the environment runs (the
    ``HeadBackend`` fields ``liveness_routes`` and ``readiness_routes``)."""
    line = release or GymRelease
    return {"liveness_routes": line.head_liveness_routes, "readiness_routes": line.head_readiness_routes}


def health(env: Any) -> tuple[int, dict[str, Any]]:
    """``/health``: ``(status, body)`` of the supervisor, with the environment's phase before the
    supervisor runs, ``servers`` (name -> state) while not ready, and ``egress`` (the effective
    allowlist, ``EgressPolicy.effective_allowlist``) once the policy is read. A ready environment's
    status is the one its Gym release line's head answers (``GymRelease.head_ready_status``:
    ``ready`` for 0.4, Gym's ``ok`` for 0.7), and ``ready`` in host mode (NMP's contract). Once a
    host-mode environment failed for good (``env.failure``): 503 ``{"status": "failed", "phase",
    "error"}``, ``error`` being the error's block (``GymRuntimeError.to_dict``)."""
    if env.failure is not None:
        return 503, {"status": "failed", "phase": env.failed_phase, "error": env.failure.to_dict()}
    code, body = env.supervisor.health()
    if code == 200:
        release = env.merged.release if env.merged is not None else None
        body["status"] = "ready" if env.req.host is not None else (release or GymRelease).head_ready_status
    if env.supervisor._startup is None and body.get("status") == "starting":
        body["phase"] = env.phase
    if code != 200:
        body["servers"] = {r["name"]: r["status"] for r in instances(env)}
    if env.egress is not None:
        body["egress"] = env.egress.describe()["allowlist"]
    return code, body


def rollouts_refused(env: Any) -> tuple[int, dict[str, Any]] | None:
    """Host mode: why ``POST /rollouts/run`` takes no batch now, as ``(503, error envelope)``: the
    environment failed for good (its error's block), or is not ready yet (``GR-HEAD-STARTING``);
    None once it is ready."""
    failure = env.failure or (env.supervisor.failure if env.supervisor.state == "failed" else None)
    if failure is not None:
        return 503, {"error": failure.to_dict()}
    if env.ready_info is None:
        return 503, {
            "error": {
                "code": "GR-HEAD-STARTING",
                "message": f"the environment is not ready (phase "
                f"{env.phase!r}): no rollout batch is taken before GET /health answers 200",
                "hint": "poll GET /health until it answers 200 (status ready)",
            }
        }
    return None


def logs(env: Any, name: str, n: int) -> dict[str, Any] | None:
    """``/servers/{name}/logs``: ``{"name", "log_file", "lines"}`` (the last ``n`` lines); for a
    server still building its venv, or placed on Ray nodes as several replicas (each has its own
    log), ``log_file`` None and one line saying so; None for a name that is no instance."""
    m = env.supervisor.members.get(name)
    replicas = [r for r, o in env.supervisor.members.items() if m is None and o.info.get("instance") == name]
    if replicas:  # placed on Ray nodes as several replicas, each with its own log
        return {
            "name": name,
            "log_file": None,
            "lines": [f"[gym-runtime] {name} runs as replicas {', '.join(replicas)}; each has its own log"],
        }
    if m is None and env.merged is not None and name in env.merged.instances:
        return {
            "name": name,
            "log_file": None,
            "lines": [f"[gym-runtime] {name}: {env.build_state.get(name, 'pending')}; it has no server log yet"],
        }
    if m is None:
        return None
    m.log.drain_now()
    return {"name": name, "log_file": str(m.log.path), "lines": m.log.tail(n)}
