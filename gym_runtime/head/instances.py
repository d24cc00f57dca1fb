"""What ``GET /server_instances`` and ``GET /support_processes`` answer, from supervisor snapshots.

``/server_instances`` lists the Gym server instances only, each with NeMo Gym's own keys and
meanings (NeMo Gym 0.4.0 ``nemo_gym/server_utils.py`` ``ServerInstanceDisplayConfig``, filled by
``nemo_gym/cli/env.py``; read by ``nemo_gym/server_status.py``, i.e. ``ng_status`` / ``gym env
status``):

=================  ===================================================================
``process_name``   the instance name (the config's top-level key)
``server_type``    ``responses_api_models`` | ``resources_servers`` | ``responses_api_agents`` |
                   ``environment_servers`` (NeMo Gym 0.7.0 ``nemo_gym/cli/env.py`` fills it alike)
``name``           the *implementation* (server directory name, e.g. ``simple_agent``)
``dir_path``       the server directory; ``entrypoint`` its entrypoint (``app.py``)
``host``/``port``  where the daemon's host reaches it; ``url`` ``http://host:port``
``pid``            the server's process id (Gym: its shell wrapper's)
``config_path``    the instance name (Gym's ``NEMO_GYM_CONFIG_PATH``)
``start_time``     wall-clock seconds of its last start (left out before it started:
                   ``ng_status`` computes ``now - start_time`` and cannot take null)
``status``         null: Gym's health verdict, filled by the client's own probe
``uptime_seconds`` seconds since it became ready (null while not ready)
=================  ===================================================================

and ours beside them: ``implementation`` (= ``name``), ``state`` (the supervisor's ``pending``
| ``starting`` | ``ready`` | ``wedged`` | ``restarting`` | ``failed`` | ``stopping`` | ``stopped``),
``restarts``, ``ready_after_s``, ``last_exit``, ``error``, ``wedged`` (what the liveness probe
missed, from when it found the server wedged until it is ready again; else null), ``log_file``,
``sandboxes`` (its live task sandboxes, docs/runtime.md "Task sandboxes"); for a replica on a Ray node
(docs/scale-out.md) also ``placement`` (``ray``), ``instance``, ``replica``, ``node``,
``node_id``, ``isolation``, ``remote_pid`` (its process id on that node; ``pid`` is null) and
``moves`` (times it was placed again on another node after its node was lost); under the
``opensandbox`` sandbox backend ``sandbox`` (the id of the OpenSandbox sandbox it runs in now) and
``isolation`` (``opensandbox``; docs/runtime.md "Sandbox backends").

Processes that are not Gym servers (the built-in stub model, a private Ray head) are listed by
``/support_processes`` instead: ``name``, ``kind`` (``model`` | ``ray``), ``implementation``,
``host``, ``port``, ``url``, ``pid``, ``state`` and the same supervision fields.
"""

from __future__ import annotations

from typing import Any

OURS = ("restarts", "ready_after_s", "last_exit", "error", "wedged", "log_file", "sandboxes")
PLACED = ("placement", "instance", "replica", "node", "node_id", "isolation", "remote_pid", "moves", "sandbox")


def server_instance(snap: dict[str, Any]) -> dict[str, Any]:
    """One ``/server_instances`` entry from a server member's snapshot (``Member.snapshot``)."""
    out = {
        "process_name": snap["name"],
        "server_type": snap.get("server_type"),
        "name": snap.get("implementation"),
        "dir_path": snap.get("dir_path"),
        "entrypoint": snap.get("entrypoint"),
        "host": snap.get("host"),
        "port": snap.get("port"),
        "url": snap.get("url"),
        "pid": snap.get("pid"),
        "config_path": snap.get("config_path") or snap["name"],
    }
    if snap.get("start_time") is not None:
        out["start_time"] = snap["start_time"]
    out.update(
        status=None,
        uptime_seconds=snap.get("uptime_seconds"),
        implementation=snap.get("implementation"),
        state=snap.get("status"),
        **{k: snap.get(k) for k in OURS},
    )
    out.update({k: snap[k] for k in PLACED if k in snap})
    return out


def support_process(snap: dict[str, Any]) -> dict[str, Any]:
    """One ``/support_processes`` entry (stub model, Ray head) from a member's snapshot."""
    return {
        "name": snap["name"],
        "kind": snap.get("kind"),
        "implementation": snap.get("implementation"),
        "host": snap.get("host"),
        "port": snap.get("port"),
        "url": snap.get("url"),
        "pid": snap.get("pid"),
        "state": snap.get("status"),
        "start_time": snap.get("start_time"),
        "uptime_seconds": snap.get("uptime_seconds"),
        **{k: snap.get(k) for k in OURS},
    }


def split(snapshots: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(server instances, support processes)`` of every member's snapshot, in start order."""
    servers = [server_instance(s) for s in snapshots if s.get("kind") == "server"]
    return servers, [support_process(s) for s in snapshots if s.get("kind") != "server"]
