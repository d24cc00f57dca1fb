"""One server in its group's OpenSandbox sandbox, as the supervisor sees it (docs/runtime.md, "Sandbox
backends").

:class:`ServerProcess` answers what :class:`sandbox.SandboxedProcess` answers (``poll``,
``returncode``, ``exit_info``, ``mark``, ``wait``, ``stop``, ``kill_now``, ``app_pid``,
``memory_rss``; ``pid`` is None: no process of this host), so supervision, restarts and the
"same start-up exit twice" rule are the local backend's. Its life, in one task:

1. the sandbox: its group's (:mod:`.groups`: the servers of its venv), made before the first
   start (:meth:`OpenSandboxEnvironment.prepare`), with the group's forwarder (:mod:`.forwarder`);
   a restart starts in the same sandbox while a sibling still runs there, else in a new one;
2. an execd background command: the server, under :data:`.groups.LAUNCHER` (its limits), with its
   environment and private variables as the command's own ``envs`` (never the sandbox's
   environment, never a command line), in a process group of its own;
3. the relay in front of it (:mod:`.relay`) points at the sandbox's endpoint for its port;
4. its command's status and its log (from its cursor, into the server's log pipe) are asked in the
   environment's passes (:mod:`.passes`: one pass a second for every server of the run, so an exit
   is seen within about a second);
5. when it ends its command is interrupted (its process group ends) and the sandbox is left to
   its siblings, or deleted when it was the last one there (:meth:`.groups.Groups.leave`).

Exit reasons besides the local ones (``memory-limit`` and ``pids-limit`` from the launcher's
watch): ``sandbox-gone`` (the sandbox was deleted from outside:
404), ``service-lost`` (the OpenSandbox server did not answer for :data:`SERVICE_GRACE_S` while
execd did not either, or did not answer a create: the supervisor starts the server again without
counting it, so its next create waits for the service, until the outage is
``OpenSandboxConnection.outage_s`` old, :meth:`OpenSandboxEnvironment.outage`; a server restart
shorter than the grace is ridden out: sandboxes outlive it), ``service-gone`` (the service away
past that deadline), ``start-failed`` (a create or command refused; ``detail`` holds the
``GR-OSB-*`` block's message).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any

from sandbox.elsewhere import ElsewhereExit
from sandbox.process import ExitInfo

from .failures import unreachable
from .groups import LIMIT_EXITS, launched

CALL_S = 3.0  # one status call (execd in a busy sandbox can take a second or more)
SERVICE_GRACE_S = 60.0


class ServerProcess(ElsewhereExit):
    """The handle :meth:`OpenSandboxEnvironment.spawn` returns (module doc)."""

    def __init__(self, env: Any, spec: Any, log_fd: int | None) -> None:
        super().__init__()
        self.env, self.spec, self.name = env, spec, spec.name
        self.limits = spec.limits
        self._log_fd = os.dup(log_fd) if log_fd is not None else None
        if self._log_fd is not None:
            os.set_blocking(self._log_fd, False)
        self.box: Any = None  # the SDK's Sandbox, once created
        self.command: str | None = None
        self._cursor: int | None = None
        self.started_at = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._run())

    # --- the rest of the protocol of sandbox.SandboxedProcess (its exit half: ElsewhereExit) ----
    def memory_rss(self) -> int:
        return 0  # counted by the OpenSandbox server, not on this host

    def tree(self) -> list:
        return []

    async def stop(self, grace_s: float = 5.0, kill_wait_s: float = 5.0) -> ExitInfo:
        """Interrupt the server's command (execd sends its process group SIGTERM), wait ``grace_s``,
        then end it (its process group killed, or its sandbox deleted when no sibling runs there)."""
        self.mark("terminated")
        if self._exit is None and self.box is not None and self.command is not None:
            with contextlib.suppress(Exception):
                await self.box.commands.interrupt(self.command)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._done.wait(), grace_s)
        if self._exit is None:
            self._reason = "killed" if self._reason == "terminated" else self._reason
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(self._done.wait()), kill_wait_s + 10)
        return self._exit or ExitInfo(None, "stuck", "its sandbox could not be deleted")

    def kill_now(self) -> None:
        """End it without grace (the task's clean-up: :meth:`.groups.Groups.leave`)."""
        self.mark("killed")
        if self._exit is None:
            self._task.cancel()

    @property
    def where(self) -> dict[str, Any]:
        """The sandbox, for ``/server_instances``."""
        return {"sandbox": self.box.id if self.box is not None else None, "isolation": "opensandbox"}

    # --- its life -------------------------------------------------------------------------------
    async def _run(self) -> None:
        env = self.env
        status: dict[str, Any] = {}
        gone = False
        try:
            await self._enter_and_start()
            env.relay_for(self.spec).point(await env.endpoint(self.box, self.spec))
            logs = asyncio.ensure_future(self._pump_logs())
            try:
                status = await self._watch()
            finally:
                logs.cancel()
                await asyncio.gather(logs, return_exceptions=True)
            gone = status["reason"] == "sandbox-gone"
            self._end(status["exit_code"], self._reason or status["reason"], self._detail or status.get("detail", ""))
        except asyncio.CancelledError:
            self._end(-9, self._reason or "killed", self._detail)
        except Exception as e:  # a GymRuntimeError from env (GR-OSB-*), or an SDK failure it did not expect
            words = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
            if getattr(e, "code", None) == "GR-OSB-UNREACHABLE":  # the service's outage, not the server's failure
                cause = getattr(e, "cause", None)
                self._end(-1, *env.outage(f"{words} ({cause})" if cause else words, self.spec))
            else:
                self._end(-1, "start-failed", words)
        finally:
            env.relay_for(self.spec).point(None)
            with contextlib.suppress(BaseException):
                await self._drain_log()
            if self._log_fd is not None:
                os.close(self._log_fd)
                self._log_fd = None
            with contextlib.suppress(BaseException):
                await asyncio.shield(env.groups.leave(self.spec, self.box, self.command, gone))
            self._done.set()

    async def _enter_and_start(self) -> None:
        """Enter the group's sandbox and start the server's command in it. A restart enters the
        sandbox its siblings are still counted in, which may have died with them (killed from
        outside, its siblings not yet seen ending): when the command cannot be started there, the
        lifecycle server is asked about the sandbox. Gone (404, or ended): left, and the start made
        once more in a new one. No answer: the service's outage (``GR-OSB-UNREACHABLE``, the exit
        ``service-lost``, uncounted), not the server's failure (case C73). Alive, or gone twice:
        the SDK's error is raised (``start-failed``)."""
        env = self.env
        for last in (False, True):
            self.box = await env.groups.enter(self.spec)
            try:
                await self._start_commands()
                return
            except Exception as e:
                alive = await self._alive(unknown=None)
                if alive is None and env.unreachable_since is not None:
                    what = f"starting server {self.spec.name!r} in sandbox {self.box.id}"
                    raise unreachable(env.conn, what, f"{type(e).__name__}: {e}") from None
                if alive is not False or last:
                    raise
                await env.groups.leave(self.spec, self.box, None, gone=True)
                self.box = None

    async def _alive(self, unknown: bool | None) -> bool | None:
        """The lifecycle server's word on this server's sandbox (:meth:`OpenSandboxEnvironment.alive`),
        bounded by :data:`CALL_S`; ``unknown`` when it does not answer in that time (recorded as unanswered)."""
        try:
            return await asyncio.wait_for(self.env.alive(self.box, unknown=unknown), CALL_S)
        except TimeoutError:
            self.env.answered(False)
            return unknown

    async def _start_commands(self) -> None:
        from opensandbox.models.execd import RunCommandOpts

        spec, box = self.spec, self.box
        envs = {**spec.env, **spec.private_env}
        execution = await box.commands.run(
            launched(spec, self.env.groups.parent_of(spec)),
            opts=RunCommandOpts(background=True, working_directory=str(spec.cwd), envs=envs),
        )
        self.command = execution.id

    async def _pump_logs(self) -> None:
        """The log read in every pass (a task of its own, so a slow read never delays the status);
        none for a server with no log pipe (its read would return at once, the loop never yield)."""
        while self._log_fd is not None:
            with contextlib.suppress(Exception):  # tried again at the next pass; the last read is at the end
                await self._drain_log(self.env.passes.ask)

    async def _watch(self) -> dict[str, Any]:
        """Until the command ends: its status in every pass of the environment's :mod:`.passes`,
        each call bounded by :data:`CALL_S` (the SDK's own retries would take longer)."""
        env = self.env
        silent_since: float | None = None
        while True:
            try:
                st = await env.passes.ask(lambda: self.box.commands.get_command_status(self.command))
                silent_since = None
            except Exception:  # execd or the OpenSandbox server not answering: a killed sandbox, a restart
                silent_since = silent_since or time.monotonic()
                st = None
            if st is None:
                alive = await self._alive(unknown=True)  # no answer: ridden out for SERVICE_GRACE_S
                if not alive:
                    return {
                        "exit_code": -1,
                        "reason": "sandbox-gone",
                        "detail": f"sandbox {self.box.id} was deleted or killed from outside",
                    }
                if silent_since is not None and time.monotonic() - silent_since > SERVICE_GRACE_S:
                    reason, detail = env.outage(
                        f"no answer about sandbox {self.box.id} for {SERVICE_GRACE_S:g}s", self.spec
                    )
                    return {"exit_code": -1, "reason": reason, "detail": detail}
                continue
            if st.running is False:
                code = st.exit_code if st.exit_code is not None else -1
                reason = LIMIT_EXITS.get(code) or ("signal" if code < 0 or code > 128 else "exited")
                return {"exit_code": code, "reason": reason, "detail": st.error or ""}

    async def _drain_log(self, ask: Any = None) -> None:
        """Read the command's log from the cursor into the log pipe; ``ask``: how the read is made
        (the environment's ``passes.ask``; None: at once)."""
        if self._log_fd is None or self.box is None or self.command is None:
            return
        box, command, cursor = self.box, self.command, self._cursor

        def read() -> Any:
            return box.commands.get_background_command_logs(command, cursor)

        logs = await (ask(read) if ask is not None else read())
        if logs.cursor is not None:
            self._cursor = logs.cursor
        data = logs.content.encode("utf-8", "replace") if logs.content else b""
        while data:
            try:
                n = os.write(self._log_fd, data)
            except BlockingIOError:
                await asyncio.sleep(0.05)
                continue
            data = data[n:]
