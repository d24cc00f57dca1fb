"""The handle of one server replica on a Ray node, as the supervisor sees it: the protocol of
:class:`sandbox.SandboxedProcess` (``poll``, ``returncode``, ``exit_info``, ``mark``, ``wait``,
``stop``, ``kill_now``, ``app_pid``; ``pid`` is None: there is no local process), made by
:meth:`gym_runtime.placement.remote.ReplicaLauncher.spawn` (that module's doc: how exits and a
lost node are seen, and the exit reasons).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any

from gym_runtime.errors import StartError
from gym_runtime.placement.liveness import lost_errors, node_error, ray_call, while_alive
from gym_runtime.supervise.member import NODE_LOST
from sandbox import ExitInfo
from sandbox.elsewhere import ElsewhereExit


class RemoteProcess(ElsewhereExit):
    """A server replica running on a Ray node, as the supervisor sees it (module doc)."""

    def __init__(self, launcher: Any, log_fd: int | None) -> None:
        """``launcher``: the :class:`~gym_runtime.placement.remote.ReplicaLauncher` that spawns it;
        ``log_fd``: where the replica's log lines go (duplicated here)."""
        super().__init__()
        self.launcher = launcher
        self.name = launcher.job.name
        self._log_fd = os.dup(log_fd) if log_fd is not None else None
        if self._log_fd is not None:
            os.set_blocking(self._log_fd, False)
        self._offset = 0
        self.remote_pid: int | None = None
        self._task = asyncio.get_running_loop().create_task(self._run())

    # --- the rest of the protocol of sandbox.SandboxedProcess (its exit half: ElsewhereExit) ----
    async def stop(self, grace_s: float = 5.0) -> ExitInfo:
        """TERM, grace, KILL the server on its node (or end the placement still under way)."""
        self.mark("terminated")
        actor = self.launcher.actor
        if self._exit is None and actor is not None and self.remote_pid is not None:
            with contextlib.suppress(Exception):
                await ray_call(actor.stop.remote(grace_s), grace_s + 10)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._done.wait(), 5)
        if self._exit is None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        return self._exit or ExitInfo(-1, self._reason or "terminated", self._detail)

    def kill_now(self) -> None:
        """SIGKILL the server's tree on its node, without waiting."""
        self.mark("killed")
        if self.launcher.actor is not None:
            self.launcher.actor.kill_now.remote()

    @property
    def where(self) -> dict[str, Any]:
        """Node, node id, replica index, isolation and remote pid, for ``/server_instances``."""
        lz = self.launcher
        return {
            "node": lz.node,
            "node_id": lz.node_id,
            "replica": lz.job.replica,
            "isolation": lz.facts.get("isolation"),
            "remote_pid": self.remote_pid,
            "moves": lz.moves,
        }

    # --- the replica's life ---------------------------------------------------------------------
    async def _run(self) -> None:
        lz = self.launcher
        lost = lost_errors()
        try:
            await lz.placed()
            info = await while_alive(lz.actor, ray_call(lz.actor.spawn.remote()))
            if "error" in info:
                raise node_error(lz.job.name, lz.node, info["error"])
            self.remote_pid, self._offset = info["pid"], info["log_offset"]
            lz.address.point(tuple(info["address"]))
            res = await self._watch(lz)
            self._end(res["returncode"], self._reason or res["reason"], self._detail or res["detail"])
        except lost as e:
            node, node_id = lz.node, lz.node_id
            death = await lz.death(e)
            self._end(-1, death.reason, death.detail)
            if death.reason == NODE_LOST:
                lz.lost(node, node_id)
            else:  # its worker died on a node that lives: the server's failure, placed afresh on restart
                lz.forget()
        except StartError as e:
            self._end(-1, "start-failed", e.message)
        except asyncio.CancelledError:
            self._end(-1, self._reason or "terminated", self._detail)
            raise
        except Exception as e:  # noqa: BLE001 - any other failure of a call to Ray is this replica's end
            self._end(-1, "driver-error", f"{type(e).__name__}: {e}")
        finally:
            lz.address.point(None)
            await self._drain_log(final=True)
            self._done.set()

    def _end(self, returncode: int | None, reason: str, detail: str) -> bool:
        if ended := super()._end(returncode if returncode is not None else -1, reason, detail):
            self.launcher.ended_at = time.monotonic()
        return ended

    async def _watch(self, lz: Any) -> dict[str, Any]:
        """The exit of the server, or :class:`NodeLost`, whichever comes first; log lines are
        copied meanwhile."""
        logs = asyncio.ensure_future(self._pump_logs())
        try:
            return await while_alive(lz.actor, ray_call(lz.actor.wait_exit.remote()))
        finally:
            logs.cancel()
            await asyncio.gather(logs, return_exceptions=True)

    async def _pump_logs(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            await self._drain_log()

    async def _drain_log(self, final: bool = False) -> None:
        actor = self.launcher.actor
        if self._log_fd is None:
            return
        if actor is not None:
            with contextlib.suppress(Exception):
                data, self._offset = await ray_call(actor.read_log.remote(self._offset), 5)
                while data:
                    try:
                        n = os.write(self._log_fd, data)
                    except BlockingIOError:
                        await asyncio.sleep(0.05)
                        continue
                    data = data[n:]
        if final:
            os.close(self._log_fd)
            self._log_fd = None
