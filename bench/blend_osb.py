"""The ``opensandbox`` side of ``bench/blend.py``: the sandboxes the bench's OpenSandbox server
lists, the memory of the processes in them, and a SIGKILLed daemon started again in its slot."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from bench.blend_start import Started

MIB = 2**20


def sandboxes(server) -> int:
    """How many sandboxes the OpenSandbox server ``server`` lists (this bench's server: only its runs')."""
    return len(server.sandboxes())


def sandbox_pss(server, ids: set[str]) -> dict[str, float]:
    """PSS in MiB of the processes in the sandboxes ``ids`` (their containers on this host), summed
    over them by role (``tests/helpers/opensandbox/runs.py``'s ``sandbox_rss``: execd, the forwarder,
    the launchers, the preloaded parent, the servers, others)."""
    from tests.helpers.opensandbox.runs import ROLES, sandbox_rss

    out = dict.fromkeys(ROLES, 0.0)
    for sid in ids:
        for role, b in sandbox_rss(server, sid, pss=True).items():
            out[role] += b / MIB
    return out


def run_labels(server) -> dict[str, list[str]]:
    """Sandbox ids the OpenSandbox server ``server`` lists, by the run label a daemon put on them."""
    out: dict[str, list[str]] = {}
    for box in server.sandboxes():
        run = (box.get("metadata") or {}).get("gym-runtime-run")
        if run:
            out.setdefault(run, []).append(box["id"])
    return out


def count(labels: dict[str, list[str]]) -> int:
    return sum(len(v) for v in labels.values())


def killed_daemon(pkg: Path, work: Path, env: dict[str, str], python: str, server) -> None:
    """Under ``opensandbox``: start, SIGKILL the daemon's whole session at ready (as a pod's death:
    the sandboxes stay), start again in the same state slot (the same ``--work-dir``, the slot a
    daemon labels its sandboxes with: ``gym_runtime/runtime/bringup.py``), then SIGTERM;
    prints the sandboxes the server lists at each point and the restarted daemon's line saying what
    it deleted."""
    first = Started(pkg, work / "killed", env, python)
    why = first.wait_ready()
    if why:
        print(f"killed daemon: the first start: {why}")
        return
    at_ready = run_labels(server)
    os.killpg(first.proc.pid, signal.SIGKILL)
    first.proc.wait(30)
    time.sleep(1)
    after_kill = run_labels(server)
    again = Started(pkg, work / "killed", env, python)  # the same slot: its --work-dir
    why = again.wait_ready()
    if why:
        print(f"killed daemon: the restart: {why}")
        return
    at_restart = run_labels(server)
    old_left = sum(len(v) for k, v in at_restart.items() if k in after_kill)
    t = time.monotonic()
    again.proc.send_signal(signal.SIGTERM)
    code = again.proc.wait(120)
    stop_s = time.monotonic() - t
    again.reader.join(5)
    time.sleep(1)
    reaped = next((ln.split("] ", 1)[-1].strip() for ln in again.err if "a stopped daemon of this" in ln), "none")
    print(
        f"killed daemon: sandboxes at ready {count(at_ready)}; SIGKILLed (its session) -> {count(after_kill)} left "
        f"1 s later; restarted in the same slot, ready in {again.ready_s:.1f} s -> {old_left} of the "
        f"killed run's left, {count(at_restart) - old_left} of the new run's; SIGTERM -> exit {code} in {stop_s:.2f} s, "
        f"{count(run_labels(server))} left 1 s later (load average {os.getloadavg()[0]:.1f})\n"
        f"  the restarted daemon said: {reaped}"
    )
