"""The supervisor: ONE event loop that owns every state change of every supervised process.

Shape taken from honcho's ``manager.py`` (STYLE.md): watchers and probes only *post* typed events
(``spawn``, ``exited``, ``ready``, ``not_ready``, ``squatted``, ``endpoint``, ``wedged``, ``stop``,
``stopped``)
to one queue; :meth:`Supervisor._loop` decides (record, restart with backoff, fail, shut down). Signals
only call :meth:`Supervisor.request_stop`.

Contract (docs/architecture.md §7): a child's exit is seen at once (its pidfd is watched by the
loop); any exit the daemon did not ask for is a failure even with status 0 (case C24) and is
restarted after ``backoff`` up to ``max_restarts``, then the environment is failed, except that an
exit during start-up repeating the previous start-up exit (same status, same last log line) fails
at once (case C29: a deterministic error does not change on a third try); an exit because the
server's node was lost (placement ray, ``node-lost``) is restarted without counting toward
``max_restarts`` and never fails at once: a node's loss is not the server's failure and never
ends the run (a server that cannot be placed again ends ``start-failed``, which counts); a
replica whose worker died on a node that lives (``oom``, ``worker-died``) is the server's failure,
restarted and counted as any exit, and ends for good as ``GR-PLACE-OOM`` with the fix when it was
killed for memory; start-up has a
per-server and an overall deadline whose report names the phase and the last log lines; after
ready, a server that stops answering ``GET /`` is named wedged and restarted (wedged.py); shutdown
sends TERM to every process group, waits ``shutdown_grace_s``, KILLs and reaps (case C05); a second
stop request skips the grace. The module is long because the loop is one: each event's handling
stays beside the state it changes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

import httpx

from gym_runtime.errors import StartError
from gym_runtime.policy import endpoint as policy_endpoint
from gym_runtime.supervise import port_owner, readiness, run_mark, service_outage, wedged
from gym_runtime.supervise.failure import endpoint_failure, failure_report, port_listening
from gym_runtime.supervise.interrupted import StartInterrupted
from gym_runtime.supervise.member import (
    FAILED,
    NODE_LOST,
    OOM,
    OOM_CODE,
    OOM_HINT,
    PENDING,
    READY,
    RESTARTING,
    SERVICE_GONE,
    SERVICE_LOST,
    STARTING,
    STOPPED,
    STOPPING,
    WORKER_DIED,
    Event,
    Member,
)
from gym_runtime.supervise.options import SuperviseOptions
from gym_runtime.supervise.orphans import Watchdog, group_empty, reap_orphans
from gym_runtime.supervise.rebind import handle_bind_race, respawn_after_exit
from gym_runtime.supervise.shutdown import stop_group

log = logging.getLogger("gym_runtime.supervise")


class Supervisor:
    """Start, watch, restart and stop a set of :class:`Member` processes on the running loop.

    Use: ``add(member)`` for each, ``await start(endpoints)`` (raises :class:`StartError`),
    ``await wait_stopped()`` -> exit code, ``request_stop(fast=False)`` from anywhere on the loop.
    ``state`` is ``starting`` | ``ready`` | ``failed`` | ``stopping`` | ``stopped``.
    """

    def __init__(self, options: SuperviseOptions, progress=None, owner: str = "") -> None:
        self.options = options
        self.members: dict[str, Member] = {}
        self.state = "starting"
        self.phase = "starting servers"
        self.failure: StartError | None = None
        self.exit_code = 0
        self.endpoints: dict[str, str] = {}  # model base URL -> pending | ready | failed
        self._progress = progress or (lambda msg: None)
        self._q: asyncio.Queue[Event] = asyncio.Queue()
        self._tasks: set[asyncio.Task] = set()
        self._startup: asyncio.Future | None = None
        self._done: asyncio.Future | None = None
        self._loop_task: asyncio.Task | None = None
        self._client: httpx.AsyncClient | None = None
        self._stop_started = False
        self.servers_stopped = asyncio.Event()  # set once a stop has reaped every server (not yet the rest)
        self.stop_split = ""  # after a stop: "server instances 0.22s, then ray_head and stub_model 0.03s"
        self._pgids: set[int] = set()
        self.watchdog: Watchdog | None = None  # an orphans.Watchdog when some member runs without a pid namespace
        self.owner = owner  # the daemon's state root (run_mark.owner_of)
        self.run_mark = run_mark.new_mark(owner)  # in every server's environment (run_mark.py)
        self.rebind = None  # callable(name): a new automatic port for that server (rebind.py)
        self._waiters: list[asyncio.Future] = []  # resolved after each handled event (:meth:`until`)

    # ------------------------------------------------------------------ public API
    def add(self, member: Member) -> None:
        self.members[member.name] = member

    def ready_or_gone(self, name: str) -> bool:
        """True when member ``name`` answers (READY) or is no member any more (removed by a reload)."""
        m = self.members.get(name)
        return m is None or m.status == READY

    async def start(
        self, endpoints: Sequence[str] = (), models: dict[str, tuple[str, str | None]] | None = None
    ) -> None:
        """Spawn every member and wait until all answer and every model endpoint answers (and,
        for an endpoint in ``models`` = {base URL: (model name, api key)}, lists that model when
        it answers with a model list).

        Raises :class:`StartError` (``GR-START-CRASH``, ``GR-START-TIMEOUT``...) with the phase
        reached and the last log lines of each server not ready; the caller then stops the rest.
        """
        loop = asyncio.get_running_loop()
        self._startup, self._done = loop.create_future(), loop.create_future()
        self._client = readiness.probe_client()
        self._loop_task = loop.create_task(self._loop())
        for url in endpoints:
            self.endpoints[url] = "pending"
            self._spawn_task(self._probe_endpoint(url, (models or {}).get(url)))
        self._spawn_wave()
        overall = self.options.startup_timeout_s
        try:
            await asyncio.wait_for(asyncio.shield(self._startup), overall)
        except TimeoutError:
            err = self._overall_timeout(overall)
            if not self._startup.done():
                self._startup.set_exception(err)
            raise err from None

    def post(self, event: Event) -> None:
        """Queue an event for the loop (call on the loop thread)."""
        self._q.put_nowait(event)

    def request_stop(self, fast: bool = False) -> None:
        """Begin shutdown (idempotent); a second request, or ``fast``, KILLs without grace."""
        self.post(Event("stop", data=fast or self._stop_started))

    async def wait_stopped(self) -> int:
        """Wait until every member is stopped and reaped; returns the daemon's exit code."""
        assert self._done is not None
        await asyncio.shield(self._done)
        return self.exit_code

    async def until(self, condition) -> None:
        """Return once ``condition()`` (a callable reading members' state) is true, checked after
        every event the loop handles; raises :class:`StartInterrupted` when the loop has ended."""
        while not condition():
            if self._loop_task is None or self._loop_task.done():
                raise StartInterrupted("the supervisor has stopped")
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            await fut

    def health(self) -> tuple[int, dict[str, Any]]:
        """``(200, {"status": "ready"})`` or ``(503, {"status": "starting"|"failed"|"degraded"|..., ...})``
        (``degraded``: ready, but a server was found wedged, or waits for the sandbox service, and is
        not ready again; ``wedged`` names each with what the liveness probe missed, ``sandbox_service``
        each with why it waits: service_outage.py)."""
        stuck = {m.name: m.wedged for m in self.members.values() if m.wedged}
        service = service_outage.waiting(self.members)
        if self.state == "ready" and (stuck or service):
            degraded: dict[str, Any] = {"status": "degraded", "phase": self.phase}
            if stuck:
                degraded["wedged"] = stuck
            if service:
                degraded["sandbox_service"] = service
            return 503, degraded
        if self.state == "ready":
            return 200, {"status": "ready"}
        body: dict[str, Any] = {"status": self.state, "phase": self.phase}
        waiting = [m.name for m in self.members.values() if m.status != READY]
        if waiting:
            body["not_ready"] = waiting
        if self.failure is not None:
            body["error"] = self.failure.to_dict()
        return 503, body

    # ------------------------------------------------------------------ the loop
    async def _loop(self) -> None:
        while True:
            ev = await self._q.get()
            try:
                getattr(self, f"_on_{ev.kind}")(ev)
            except Exception as e:  # a bug in a handler must not leave processes unsupervised
                log.exception("supervisor event %s failed", ev.kind)
                self._fail(ev.name or "supervisor", f"internal error handling {ev.kind}: {e!r}")
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
            if ev.kind == "stopped":
                return

    def _on_spawn(self, ev: Event) -> None:
        m = self.members[ev.name]
        if self._stop_started or m.status in (FAILED, STOPPING, STOPPED, READY):
            return
        before = m.launcher.spawn_after(m.spec)  # e.g. its venv's preloaded parent, still importing
        if before is not None:
            before.add_done_callback(lambda _f, name=m.name: self.post(Event("spawn", name)))
            return
        w = m.log.open_pipe()
        m.spec.stdout_fd = m.spec.stderr_fd = w
        m.starts += 1
        m.log.note(f"start #{m.starts}: {' '.join(map(str, m.spec.argv))} (cwd {m.spec.cwd})")
        try:
            proc = m.launcher.spawn(m.spec)
        except StartError as e:
            os.close(w)
            m.log.detach()
            m.status = FAILED
            self._fail(m.name, e.message)
            return
        finally:
            m.spec.stdout_fd = m.spec.stderr_fd = None
        os.close(w)
        m.log.attach(asyncio.get_running_loop())
        m.proc, m.status, m.spawned_at, m.started_wall = proc, STARTING, time.monotonic(), time.time()
        m.port_bound_s = m.probe_note = None
        self._watch_exit(m, proc)
        try:  # a handle of a process on another node (placement ray) has no local pid or group
            m.pgid = os.getpgid(proc.app_pid() or proc.pid) if proc.pid is not None else None
        except OSError:
            m.pgid = None
        if m.pgid is not None and m.pgid != os.getpgrp():
            self._pgids.add(m.pgid)
            if self.watchdog is not None:
                self.watchdog.watch(m.pgid)
        if m.probe_path is None:
            self.post(Event("ready", m.name, proc))
        else:
            self._spawn_task(self._probe(m, proc))

    def _on_exited(self, ev: Event) -> None:
        m = self.members[ev.name]
        if ev.proc is not m.proc:
            return
        m.log.drain_now()
        info = ev.proc.exit_info()
        m.last_exit = {"returncode": info.returncode, "reason": info.reason, "detail": info.detail, "at": time.time()}
        m.log.note(f"exited: status {info.returncode} ({info.reason}{': ' + info.detail if info.detail else ''})")
        if self.watchdog is not None and m.pgid in self._pgids and group_empty(m.pgid):
            self.watchdog.forget(m.pgid)  # an empty group's id may be reused by an unrelated process
        if (
            respawn_after_exit(self, m)
            or m.status in (STOPPING, STOPPED)
            or self._stop_started
            or handle_bind_race(self, m)
        ):
            return
        what = (
            f"exited with status {info.returncode}"
            + (" although nobody asked it to stop" if info.returncode == 0 else "")
            + f" ({info.reason})"
        )
        if info.reason in (OOM, WORKER_DIED) and info.detail:  # its replica's worker on a live node: say how
            what += f": {info.detail}"
        code, hint = (OOM_CODE, OOM_HINT) if info.reason == OOM else ("GR-START-CRASH", None)
        if m.status == wedged.WEDGED:
            what = f"was killed because it was wedged ({m.wedged})"
        if info.reason == NODE_LOST:  # not the server's failure: never ends the run (module doc)
            self._restart_after_node_loss(m, what)
            return
        if info.reason == SERVICE_LOST:  # nor is the sandbox service's outage (service_outage.py)
            service_outage.on_service_lost(self, m, what, info.detail)
            return
        if info.reason == SERVICE_GONE:  # the outage outlasted the backend's deadline: the service is named
            service_outage.on_service_gone(self, m, info.detail)
            return
        if m.status == STARTING and not m.load_bound_start:  # a second identical exit will not change on a third
            seen, m.startup_exit = m.startup_exit, (info.returncode, m.log.last_line())
            if seen == m.startup_exit:
                m.status = FAILED
                last = m.startup_exit[1]
                said = f"last log line: {last!r}" if last is not None else "no log line from it yet"
                if last is None and info.detail:
                    said += f"; {info.detail}"
                self._fail(
                    m.name,
                    f"{m.kind} {m.name!r} {what} during start-up, the same way as on its previous "
                    f"start ({said}); not restarted again, restarts are for servers that were ready once",
                    code=code,
                    hint=hint
                    or "the error is the same on every start: fix the "
                    "server or its config (its last log lines are in cause, the whole log in log), "
                    + self.options.after_fix,
                )
                return
        crashes = m.restarts - m.node_losses
        if crashes < self.options.max_restarts:
            delay = self.options.backoff(crashes)
            m.restarts += 1
            m.status, m.error = RESTARTING, what
            self._progress(f"{m.name}: {what}; restart {crashes + 1}/{self.options.max_restarts} in {delay:g}s")
            asyncio.get_running_loop().call_later(delay, self.post, Event("spawn", m.name))
        else:
            m.status = FAILED
            tries = f" after {crashes} restart{'s' if crashes != 1 else ''}" if crashes else ""
            self._fail(m.name, f"{m.kind} {m.name!r} {what}{tries}", code=code, hint=hint)

    def _restart_after_node_loss(self, m: Member, what: str) -> None:
        """``m``'s node was lost (its handle is already placing it on another node): restart it
        after the first backoff, counted in ``restarts`` and ``node_losses`` but not toward
        ``max_restarts``, and never taken for a start-up exit that repeats itself."""
        delay = self.options.backoff(0)
        m.restarts += 1
        m.node_losses += 1
        m.startup_exit = None  # its next start is on another node: not a repeat of an earlier one
        m.status, m.error = RESTARTING, what
        self._progress(
            f"{m.name}: {what}; restart in {delay:g}s on another node (a node's loss is not counted "
            f"toward the {self.options.max_restarts} restarts)"
        )
        asyncio.get_running_loop().call_later(delay, self.post, Event("spawn", m.name))

    def _on_ready(self, ev: Event) -> None:
        m = self.members[ev.name]
        if ev.proc is not m.proc or m.status != STARTING:
            return
        m.status, m.error, m.ready_s = READY, None, time.monotonic() - (m.spawned_at or time.monotonic())
        m.wedged = m.service_wait = None
        self._progress(f"{m.name}: ready in {m.ready_s:.2f}s" + (f" at {m.url}" if m.url else ""))
        if self.options.liveness_interval_s > 0 and wedged.watched(m):
            self._spawn_task(wedged.watch(self, m, ev.proc))
        self._check_all_ready()

    def _on_wedged(self, ev: Event) -> None:
        wedged.on_wedged(self, self.members[ev.name], ev.proc, ev.data)

    def _on_not_ready(self, ev: Event) -> None:
        m = self.members[ev.name]
        if ev.proc is not m.proc or m.status != STARTING:
            return
        m.status = FAILED
        m.proc.mark("killed", "not ready in time")
        self._spawn_task(m.proc.stop(0.5))
        path = m.probe_path or "/"  # None: ready once spawned, so never late
        what = f"did not print {path[4:]!r}" if path.startswith("log:") else f"did not answer GET {path} at {m.url}"
        self._fail(
            m.name,
            f"{m.kind} {m.name!r} {what} within {self.options.server_ready_timeout_s:g}s",
            code="GR-START-TIMEOUT",
        )

    def _on_squatted(self, ev: Event) -> None:
        m = self.members[ev.name]
        if ev.proc is not m.proc or m.status != STARTING:
            return
        m.status = FAILED
        self._spawn_task(m.proc.stop(0.5))
        self._fail(
            m.name,
            f"{m.kind} {m.name!r}: its port {m.port} answers, but the listener is held by {ev.data}, "
            f"not by {m.name!r} (port squatting): that process would receive {m.name!r}'s requests",
            code="GR-START-PORT-SQUAT",
            hint="a server of this environment binds ports that are not its own: "
            "remove it from the package, or report it to the environment's author",
        )

    def _on_endpoint(self, ev: Event) -> None:
        self.endpoints[ev.name] = ev.data if isinstance(ev.data, str) else "failed"
        if ev.data == "ready":
            self._check_all_ready()
        else:  # "failed", ("auth", status), ("wrong-model", name, served) or ("not-root", suggestion, detail)
            message, code, hint = endpoint_failure(ev.name, ev.data, self.options.model_endpoint_timeout_s)
            self._fail("policy model", message, code=code, hint=hint)

    def _on_stop(self, ev: Event) -> None:
        fast = bool(ev.data)
        if not self._stop_started:
            self._stop_started = True
            self.state, self.phase = "stopping", "shutting down"
            if self._startup is not None and not self._startup.done():
                self._startup.set_exception(StartInterrupted("start-up was interrupted by a stop request"))
            self._spawn_task(self._shutdown(0.0 if fast else self.options.shutdown_grace_s))
        elif fast:
            self._progress("second stop request: killing every process group now")
            for m in self.members.values():
                if m.proc is not None and m.proc.poll() is None:
                    m.escalated = True
                    m.proc.kill_now()

    def _on_stopped(self, ev: Event) -> None:
        self.state, self.phase = "stopped", "stopped"
        for t in list(self._tasks):
            t.cancel()
        if self._done is not None and not self._done.done():
            self._done.set_result(self.exit_code)

    # ------------------------------------------------------------------ decisions
    def _spawn_wave(self) -> bool:
        """Spawn the lowest ``wave`` with members never started (e.g. Ray before the servers that
        join it); True when one was spawned."""
        pending = [m for m in self.members.values() if m.status == PENDING]
        if not pending:
            return False
        wave = min(m.wave for m in pending)
        for m in pending:
            if m.wave == wave:
                m.status = STARTING
                self.post(Event("spawn", m.name))
        return True

    def _check_all_ready(self) -> None:
        if self.state != "starting" or self._startup is None or self._startup.done():
            return
        started = [m for m in self.members.values() if m.status != PENDING]
        if started and all(m.status == READY for m in started) and self._spawn_wave():
            return
        if all(m.status == READY for m in self.members.values()) and all(s == "ready" for s in self.endpoints.values()):
            self.state, self.phase = "ready", "ready"
            self._startup.set_result(None)

    def _fail(self, name: str, message: str, code: str = "GR-START-CRASH", hint: str | None = None) -> None:
        m = self.members.get(name)
        if m is not None:
            m.error = message
        starting = self._startup is not None and not self._startup.done()
        err = self._report(message, code, hint, [name] if m is not None else [])
        if self.failure is None:
            self.failure = err
        if starting and self._startup is not None:  # start() raises it: the caller reports it once
            self.state = "failed"
            self._startup.set_exception(err)
            self._startup.exception()  # retrieved: start() re-raises it
        elif not self._stop_started:
            self._progress(err.render())  # after ready this is the only report
            self.state, self.phase = "failed", f"failed: {message}"
            if not self.options.keep_going:
                self.exit_code = err.exit_code
                self.request_stop()

    def _report(self, message: str, code: str, hint: str | None, names: list[str]) -> StartError:
        return failure_report(
            self.members, self.phase, self.options.log_tail_lines, message, code, hint, names, self.options.after_fix
        )

    def _overall_timeout(self, overall: float) -> StartError:
        """The error of a start-up past ``overall`` s: when every server is ready and only policy
        endpoints are still awaited (their own deadline is longer), ``GR-START-MODEL-ENDPOINT``
        naming them, as their own deadline would have; else ``GR-START-TIMEOUT`` naming the
        servers not ready."""
        pending = [u for u, s in self.endpoints.items() if s == "pending"]
        if pending and all(m.status == READY for m in self.members.values()):
            said = [endpoint_failure(u, "failed", overall) for u in pending]
            return self._report("; ".join(m for m, _, _ in said), said[0][1], said[0][2], [])
        return self._timeout_error(f"the environment was not ready within {overall:g}s")

    def _timeout_error(self, message: str) -> StartError:
        return self._report(
            message, "GR-START-TIMEOUT", "raise --startup-timeout / --ready-timeout if the servers are merely slow", []
        )

    # ------------------------------------------------------------------ watchers (post events only)
    def _spawn_task(self, coro) -> asyncio.Task:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t

    def _watch_exit(self, m: Member, proc: Any) -> None:
        """Post ``exited`` the moment ``proc`` ends (the process handle's own exit watch: one per
        process, so a reap by any other caller cannot hide the exit)."""

        async def watch() -> None:
            await proc.wait()
            self.post(Event("exited", m.name, proc))

        self._spawn_task(watch())

    async def _probe(self, m: Member, proc: Any) -> None:
        assert self._client is not None and m.url is not None and m.probe_path is not None
        deadline = time.monotonic() + self.options.server_ready_timeout_s
        ok, delay = False, 0.05
        while not ok and proc.poll() is None and time.monotonic() < deadline:
            until = min(deadline, time.monotonic() + 1)
            if m.probe_path.startswith("log:"):
                ok = await readiness.wait_log(m.log, m.probe_path[4:], until)
            elif m.probe_path == "tcp" and m.public is not None:
                ok = await readiness.wait_tcp(m.public[0], m.public[1], until)
            else:  # one GET at a time (50 ms, slowing to 500 ms), noting what a timeout report says (failure.py)
                if m.port_bound_s is None and port_listening(proc.app_pid() or proc.pid, m.port):
                    m.port_bound_s = time.monotonic() - (m.spawned_at or time.monotonic())
                m.probe_note = await readiness.probe(self._client, m.url + m.probe_path)
                ok = m.probe_note is None
                if not ok:
                    await asyncio.sleep(min(delay, max(deadline - time.monotonic(), 0)))
                    delay = min(delay * 1.5, 0.5)
        if ok and m.port is not None and not m.probe_path.startswith("log:"):  # the answer must be m's own
            others = {n: o.proc for n, o in self.members.items()}
            held = await asyncio.to_thread(port_owner.squatter, m.name, proc.pid, m.port, others)
            if held is not None:
                self.post(Event("squatted", m.name, proc, data=held))
                return
        if proc.poll() is None:
            self.post(Event("ready" if ok else "not_ready", m.name, proc))

    async def _probe_endpoint(self, url: str, model: tuple[str, str | None] | None) -> None:
        assert self._client is not None
        t = self.options.model_endpoint_timeout_s
        ok = t <= 0 or await readiness.wait_http(self._client, readiness.model_probe_url(url), time.monotonic() + t)
        outcome = (
            await policy_endpoint.check(self._client, url, model) if ok and t > 0 else ("ready" if ok else "failed")
        )
        self.post(Event("endpoint", url, data=outcome))

    def running(self) -> str:
        """What a stop is still waiting on: ``name (pid N, status)`` of every member not yet
        reaped, or ``""``."""
        left = [
            f"{m.name} (pid {m.proc.pid}, {m.status})"
            for m in self.members.values()
            if m.proc is not None and m.proc.poll() is None
        ]
        return ", ".join(left)

    async def _shutdown(self, grace: float) -> None:
        """Stop the servers first, then what they use (the Ray head and the stub model, whatever
        wave they started in: a Ray driver hangs in its own shutdown when its head is gone): TERM each
        process group, wait ``grace``, KILL, reap; then the orphans, both sweeps at once (what is left in
        the servers' groups, and the processes holding the run's mark); then post ``stopped``.
        :attr:`servers_stopped` is set between the two groups, and :attr:`stop_split` says the seconds
        of each group when both had members (the daemon's ``stop took`` line shows it, teardown.py)."""

        running = [m for m in self.members.values() if m.status != PENDING]
        servers, rest = [m for m in running if m.kind == "server"], [m for m in running if m.kind != "server"]
        took_servers, stuck = await stop_group(servers, grace, self._progress)
        self.servers_stopped.set()
        took_rest, stuck_rest = await stop_group(rest, grace, self._progress)
        if stuck or stuck_rest:
            self.exit_code = self.exit_code or 3
        if servers and rest:
            self.stop_split = (
                f"server instances {took_servers:.2f}s, then {' and '.join(m.name for m in rest)} {took_rest:.2f}s"
            )
        for m in self.members.values():
            m.status = FAILED if m.status == FAILED else STOPPED
            m.log.detach()
        # both sweeps at once: the groups' leftovers, and the helpers that left them (a walk of every
        # process's environment, in a thread): neither waits on the other
        _, left = await asyncio.gather(
            reap_orphans(self._pgids), asyncio.to_thread(run_mark.kill_marked, self.run_mark)
        )
        if left:
            self._progress(
                f"stopped {len(left)} process(es) that had left their server's process group "
                f"(setsid): {'; '.join(left)}"
            )
        if self._client is not None:
            await self._client.aclose()
        self.post(Event("stopped"))
