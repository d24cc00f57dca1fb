"""``RunHelper``: NeMo Gym 0.7.0's in-process launcher API (``nemo_gym/cli/env.py``), run by gym-runtime.

Signatures and meaning, as NeMo RL's ``NemoGym`` actor calls them (``_spinup``, ``health_check``,
shutdown):

* ``start(global_config_dict_parser_config)`` brings the head server and every server up and
  returns once every server is ready (None, as Gym's). On any failure, or a ``shutdown()`` from
  another thread meanwhile, it stops everything it started and raises a
  :class:`~gym_runtime.errors.GymRuntimeError` subclass (a ``GR-*`` code, message, cause, hint,
  log; picklable, so it crosses a Ray actor boundary whole). A second ``start`` on the same helper
  raises ``GR-NEMOGYM-STARTED``. Once ready, where ``nemo_gym`` is importable, Gym's in-process
  global config holds the resolved config the servers were started with, as Gym's own ``start``
  leaves it (:mod:`gym_runtime.nemo_gym.gym_cache`): ``nemo_gym.global_config.get_global_config_dict()``
  returns it and never parses the caller's command line.
* ``poll()`` returns while the environment is up and raises once a server failed for good (its
  restarts used up: :class:`~gym_runtime.supervise.options.SuperviseOptions`), naming it with its
  log tail, or once the environment is no longer running; before ``start`` it raises
  ``GR-NEMOGYM-NOT-STARTED``.
* ``shutdown()`` stops every process the helper started (TERM, grace, KILL, reap) and returns when
  none is left; during another thread's ``start`` it stops that start and waits for it to leave.
  Safe to call twice, or without a start.
* ``display_server_instance_info()`` prints each server instance (name, type/implementation,
  address, state), as Gym's does.

``start`` first makes what the process inherited usable (:func:`gym_runtime.inherited.normalise`,
without touching the trainer's signal handlers or mask: a closed standard descriptor, an ignored
SIGCHLD, an unusable HOME, the soft open-file limit). The environment runs on a private event loop
in a thread of its own, its signal mask empty (so a caller with or without a running event loop,
on any thread, can call every method); that thread lives until
``shutdown()``, since the servers' parent-death signal is tied to the thread that spawned them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import sys
import threading
from pathlib import Path
from pprint import pprint
from typing import Any

from gym_runtime.errors import GymRuntimeError, StartError
from gym_runtime.head.instances import split
from gym_runtime.inherited import clear_thread_mask, normalise
from gym_runtime.nemo_gym import gym_cache
from gym_runtime.nemo_gym.job import GlobalConfigDictParserConfig, read_job
from gym_runtime.runtime.api import Runtime
from gym_runtime.supervise import head_view
from gym_runtime.supervise.interrupted import StartInterrupted
from gym_runtime.supervise.options import SuperviseOptions


class RunHelper:
    """One environment started in process (module doc). ``head_url`` and ``ready_info`` are set
    once ``start`` returned."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runtime: Runtime | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._start_left = threading.Event()
        self._start_left.set()
        self._shutting_down = False
        self.ready_info: dict[str, Any] | None = None

    # ------------------------------------------------------------------ Gym's API
    def start(self, global_config_dict_parser_config: GlobalConfigDictParserConfig) -> None:
        """Start every server and wait until all are ready (module doc). Raises a
        :class:`GymRuntimeError` subclass after stopping what was started."""
        with self._lock:
            if self._runtime is not None or not self._start_left.is_set():
                raise StartError(
                    "this RunHelper was already started",
                    code="GR-NEMOGYM-STARTED",
                    hint="make one RunHelper per environment",
                )
            if self._shutting_down:
                raise StartInterrupted("shutdown() was called before start()")
            self._start_left.clear()
        try:
            for note in normalise(process_wide=False):  # the trainer's process: its signal handlers stay
                print(f"gym-runtime: inherited: {note}", file=sys.stderr, flush=True)
            job = read_job(global_config_dict_parser_config, Path.cwd(), sys.argv[1:])
            options = SuperviseOptions(startup_timeout_s=job.startup_timeout_s) if job.startup_timeout_s else None
            runtime = Runtime(
                job.package,
                job_config=job.job_config,
                overrides=job.overrides,
                policy_base_url=job.policy_base_url,
                policy_api_key=job.policy_api_key,
                policy_model_name=job.policy_model_name,
                head_host=job.head_host,
                head_port=job.head_port,
                work_dir=job.work_dir,
                options=options,
                progress=lambda line: print(line, file=sys.stderr, flush=True),
            )
            with self._lock:
                if self._shutting_down:
                    raise StartInterrupted("shutdown() was called while start() read the config")
                self._runtime = runtime
                self._open_loop()
                loop = self._loop
            assert loop is not None  # made by _open_loop()
            future = asyncio.run_coroutine_threadsafe(runtime.start(), loop)
            try:
                self.ready_info = future.result()
            except concurrent.futures.CancelledError:
                raise StartInterrupted("shutdown() stopped the start-up before every server was ready") from None
            env = runtime.env
            assert env is not None and env.merged is not None  # a start that returned made both
            gym_cache.fill(env.outside, env.merged.data.get("ray_head_node_address"))
        except GymRuntimeError:
            self._close(forget=True)
            raise
        except BaseException as e:
            self._close(forget=True)
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise StartError(
                f"start-up failed: {type(e).__name__}: {e}",
                code="GR-NEMOGYM-START",
                hint="everything started was stopped; each server's log is in the run "
                "directory's logs/ (nemo_gym_log_dir, when given)",
            ) from None
        finally:
            self._start_left.set()

    def poll(self) -> None:
        """Raise once a server failed for good or the environment stopped (module doc)."""
        runtime = self._runtime
        if runtime is None or runtime.env is None or self.ready_info is None:
            raise StartError(
                "poll() before start() returned", code="GR-NEMOGYM-NOT-STARTED", hint="call RunHelper.start(...) first"
            )
        sup = runtime.env.supervisor
        if sup.failure is not None:
            raise copy.copy(sup.failure)
        if sup.state in ("stopping", "stopped") or self._thread is None or not self._thread.is_alive():
            raise StartError(
                f"the environment is no longer running (state {sup.state})",
                code="GR-NEMOGYM-STOPPED",
                hint="start a new RunHelper",
            )

    def shutdown(self) -> None:
        """Stop everything this helper started and wait until nothing is left (module doc)."""
        with self._lock:
            self._shutting_down = True
            runtime, loop = self._runtime, self._loop
        if runtime is not None and loop is not None and loop.is_running():
            asyncio.run_coroutine_threadsafe(runtime.stop(), loop).result()
        self._start_left.wait()
        self._close()

    def display_server_instance_info(self) -> None:
        """Print each server instance with the keys of the head server's ``GET /server_instances``
        (Gym's ``ServerInstanceDisplayConfig`` keys), or Gym's line when there is none."""
        runtime = self._runtime
        table = split(head_view.instances(runtime.env))[0] if runtime is not None and runtime.env is not None else []
        if not table:
            print("No server instances to display.")
            return
        print(f"\n{'#' * 100}\n#\n# Server Instances\n#\n{'#' * 100}\n")
        for i, inst in enumerate(table, 1):
            print(f"[{i}] {inst['process_name']} ({inst['server_type']}/{inst['name']})")
            pprint({k: v for k, v in inst.items() if k not in ("start_time", "status", "uptime_seconds")})
        print(f"{'#' * 100}\n")

    # ------------------------------------------------------------------ state
    @property
    def head_url(self) -> str | None:
        """``http://host:port`` of the head server once started."""
        return self._runtime.head_url if self._runtime is not None else None

    # ------------------------------------------------------------------ the private loop
    def _open_loop(self) -> None:
        import uvloop  # the daemon's loop, as for `up` (docs/performance-history.md, "Sandbox data path")

        self._loop = uvloop.new_event_loop()
        loop = self._loop

        def run() -> None:  # the threads and servers it starts inherit its (empty) signal mask
            clear_thread_mask()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="gym-runtime-nemo-gym", daemon=True)
        self._thread.start()

    def _close(self, forget: bool = False) -> None:
        """Stop the environment if it still runs, then the loop thread (idempotent); ``forget``
        (after a failed start) lets the helper be started again, as Gym's can."""
        with self._lock:
            loop, thread, runtime = self._loop, self._thread, self._runtime
            self._loop = self._thread = None
            if forget:
                self._runtime = None
        if loop is None:
            return
        if runtime is not None and loop.is_running():
            asyncio.run_coroutine_threadsafe(runtime.stop(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(30)
        loop.close()
