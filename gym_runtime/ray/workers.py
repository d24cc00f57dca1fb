"""What a Ray worker sees: the same as the server that submitted its task.

Gym trees run part of their work as Ray tasks (``@ray.remote``): code_gen checks generated code
in ``lcb_integration.compute_code_generation_metrics.check_correctness_remote``, scicode runs
sub-steps with ``ray.remote(run_substep)`` (NeMo Gym 0.4.0 ``resources_servers/``). A worker
process is started by the raylet of the node that runs the task, not by the server, so four
things must hold for it to import the tree's own modules and run in the tree's venv:

1. **The files.** Ray adds the submitting driver's script directory and working directory (both
   the server directory, under Gym's process contract) to every worker's ``sys.path``: ``ray.init``
   records them as the job's ``py_driver_sys_path`` (``ray/_private/worker.py``, ``connect``) and
   each worker inserts them when it picks up the job (``ray/_raylet.pyx``,
   ``maybe_initialize_job_config``). Those paths must exist where the raylet runs: our private
   head's sandbox binds every server's package tree read-only at the same path
   (:func:`head_read_only_paths`) next to the venvs.
2. **The venv.** A task without ``runtime_env={"py_executable": ...}`` runs in the raylet's own
   default Python, the venv the head was started from, which is another server's venv when
   several use Ray. Each server is therefore started as a Ray *job* whose runtime environment
   names its own interpreter: ``RAY_JOB_CONFIG_JSON_ENV_VAR``, the variable through which Ray's
   job supervisor hands a job entrypoint its runtime environment
   (``ray/dashboard/modules/job/job_supervisor.py``), read by ``ray.init``. A task's own
   ``runtime_env`` still wins field by field (Ray merges job and task runtime environments,
   ``env_vars`` key by key); ``RAY_OVERRIDE_JOB_RUNTIME_ENV=1`` lets a server's own
   ``ray.init(runtime_env=...)`` win over ours instead of failing on a conflict.
3. **The environment.** The job's ``env_vars`` carry the server's ``PYTHONPATH`` (its server
   directory), so processes a task starts (``multiprocessing``, ``subprocess`` of
   ``sys.executable``) import the tree too.
4. **Not the daemon's launcher.** ``ray.init`` walks its process ancestry for a ``uv run`` command
   and, when it finds one, replaces the job's interpreter with that ``uv run`` command line and
   uploads the working directory as the job's ``working_dir`` (``RAY_ENABLE_UV_RUN_RUNTIME_ENV``,
   ``ray/_private/runtime_env/uv_runtime_env_hook.py``). A server started by a daemon that was
   itself started with ``uv run gym-runtime up`` would see that ancestor at isolation ``none``;
   the hook is turned off, since the server's venv is not the daemon's uv project.

One more variable is about the server itself, not its workers: ``RAY_RUNTIME_ENV_HOOK`` names the
module every venv this runtime builds holds, which lets the server's Ray driver exit without Ray's
fixed 0.5 s sleep (:mod:`gym_runtime.venvs.exit_hook`).

A joined outside cluster runs tasks on whatever node Ray picks: the operator must make every
node that can run them see the same paths (the package directory and ``GYM_RUNTIME_VENV_DIR``,
e.g. one shared filesystem mounted at the same place) with the same Python and Ray versions, as
Gym's own trees already assume (``py_executable: sys.executable``); see docs/runtime.md, "Ray".
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

JOB_CONFIG_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"
OVERRIDE_VAR = "RAY_OVERRIDE_JOB_RUNTIME_ENV"
UV_RUN_HOOK_VAR = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"
RUNTIME_ENV_HOOK_VAR = "RAY_RUNTIME_ENV_HOOK"
# the module every venv this runtime builds holds (written by gym_runtime.venvs.exit_hook) and its hook
RAY_MODULE = "_gym_runtime_ray_exit"
RAY_HOOK = f"{RAY_MODULE}.end_driver_at_exit"


def job_env(server_dir: Path, venv_python: Path) -> dict[str, str]:
    """Variables that make a server's Ray job run its tasks like the server itself: its venv's
    interpreter (``py_executable``) and its ``PYTHONPATH`` (the server directory), never the
    daemon's ``uv run``; and whose driver exits without Ray's 0.5 s sleep (see the module doc).
    ``venv_python`` must be in a venv this runtime built (it holds the hook's module)."""
    runtime_env = {"py_executable": str(venv_python), "env_vars": {"PYTHONPATH": str(server_dir)}}
    return {
        JOB_CONFIG_VAR: json.dumps({"runtime_env": runtime_env}),
        OVERRIDE_VAR: "1",
        UV_RUN_HOOK_VAR: "0",
        RUNTIME_ENV_HOOK_VAR: RAY_HOOK,
    }


def head_read_only_paths(server_dirs: Iterable[Path]) -> list[Path]:
    """The package trees a private Ray head must see: each server's ``{server_type}/{implementation}/``
    lives two levels below its package root (or the built-in ``servers/``), which servers see
    read-only too."""
    return sorted({Path(d).parent.parent for d in server_dirs})
