"""The watchdog process: kills every server process group once the daemon is gone (C05).

Run as a plain script (``python -I -S watchdog.py DAEMON_PID [MARK]``, no imports beyond the stdlib) in
its own session, so a signal to the daemon's process group does not reach it. It reads lines from
stdin, a pipe whose only write end the daemon holds: ``+PGID`` (a server's process group was
started), ``-PGID`` (that group is empty now), ``exit`` (clean stop: nothing to do). End of file
without ``exit`` means the daemon died (SIGKILL, OOM): every registered group gets SIGKILL, which
reaches the helpers a server spawned as well, at isolation ``none`` where no pid namespace does it.
Then every process whose environment holds ``GYM_RUNTIME_RUN_MARK=MARK`` (the run's mark,
:mod:`gym_runtime.supervise.run_mark`) gets SIGKILL too: helpers that left their server's group
(``setsid``), read from ``/proc/PID/environ``, again until none is left (a bounded number of rounds).
"""

import os
import signal
import sys

ROUNDS = 20


def marked(mark: bytes) -> list[int]:
    """Pids whose environment holds ``GYM_RUNTIME_RUN_MARK=mark`` (``proc(5)``: NUL-separated)."""
    want, out = b"GYM_RUNTIME_RUN_MARK=" + mark, []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if want in env.split(b"\0"):
            out.append(int(name))
    return out


def kill_marked(mark: bytes) -> None:
    for _ in range(ROUNDS):
        pids = marked(mark)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGHUP):  # terminal signals are for the daemon, not for us
        signal.signal(sig, signal.SIG_IGN)
    groups: set[int] = set()
    pending = b""
    while True:
        chunk = os.read(0, 4096)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line == b"exit":
                return
            if line[:1] in (b"+", b"-") and line[1:].isdigit():
                (groups.add if line[:1] == b"+" else groups.discard)(int(line[1:]))
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    if len(sys.argv) > 2 and sys.argv[2]:
        kill_marked(sys.argv[2].encode())


if __name__ == "__main__":
    main()
