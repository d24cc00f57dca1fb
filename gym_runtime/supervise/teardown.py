"""A stop that never hangs: every step of the daemon's teardown has a deadline and a name.

:class:`Teardown` runs the steps of a stop in order (servers, Ray head, head server, sandbox
forwards and proxy, netns holder, watchdog, log sinks). A step that overruns its deadline is
reported by name with what it was waiting on, left behind (cancelled, never awaited again), and
the remaining steps still run; the stop then counts as unclean (:attr:`Teardown.clean` False, exit
code 3). A backstop thread bounds the whole stop even when the event loop itself is stuck: at
``hard_deadline_s`` (25 s, or the shutdown grace + 10 s when an operator set a longer grace) it writes every thread's stack to stderr, SIGKILLs the process groups it was
given and ends the process with exit code 3, well inside a pod's default
``terminationGracePeriodSeconds`` of 30 s (docs/architecture.md §7, "Shutdown").
"""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

# Deadlines in seconds. The whole stop must end well inside Kubernetes' default 30 s grace.
HARD_DEADLINE_S = 25.0
UNCLEAN_EXIT_CODE = 3


@dataclass(frozen=True)
class Overrun:
    """A step that did not finish: its name, its deadline (s) and what it was waiting on."""

    step: str
    deadline_s: float
    waiting_on: str


class Teardown:
    """Run named, bounded stop steps. ``say(msg)`` reports progress; ``process_groups()`` lists
    the process groups the backstop SIGKILLs if the stop as a whole overruns ``hard_deadline_s``.

    Use: ``arm()`` when the stop begins; ``await step(name, awaitable, deadline_s, waiting_on)``
    per step; ``disarm()`` at the end. ``overruns`` lists what overran; ``clean`` is True when
    nothing did; ``timings`` lists ``(step, seconds)`` in order and :meth:`summary` says them, each
    with what :meth:`note` added to it.
    """

    def __init__(
        self,
        say: Callable[[str], None],
        process_groups: Callable[[], Iterable[int]] = tuple,
        hard_deadline_s: float = HARD_DEADLINE_S,
    ) -> None:
        self._say = say
        self._groups = process_groups
        self.hard_deadline_s = hard_deadline_s
        self.overruns: list[Overrun] = []
        self.timings: list[tuple[str, float]] = []
        self.notes: dict[str, str] = {}
        self.current = "starting the stop"
        self._t0 = time.monotonic()
        self._timer: threading.Timer | None = None

    @property
    def clean(self) -> bool:
        return not self.overruns

    def remaining(self) -> float:
        """Seconds left before the backstop fires."""
        return self.hard_deadline_s - (time.monotonic() - self._t0)

    def arm(self) -> None:
        self._t0 = time.monotonic()
        self._timer = threading.Timer(self.hard_deadline_s, self._backstop)
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def step(
        self, name: str, work: Awaitable[Any], deadline_s: float, waiting_on: Callable[[], str] = lambda: ""
    ) -> Any:
        """Await ``work`` for at most ``deadline_s`` seconds (less if the whole stop's time runs
        out first: 2 s are kept for the steps after it). Returns its result, or None when it
        overran or raised; either is recorded and said, never raised."""
        self.current = name
        budget = max(0.1, min(deadline_s, self.remaining() - 2.0))
        task = asyncio.ensure_future(work)
        t0 = time.monotonic()
        done, _ = await asyncio.wait({task}, timeout=budget)
        self.timings.append((name, time.monotonic() - t0))
        if not done:
            task.cancel()  # left behind: a step that ignores cancellation must not hold up the others
            what = waiting_on() or "no detail"
            self.overruns.append(Overrun(name, budget, what))
            self._say(f"stop: {name} did not finish within {budget:g}s (waiting on: {what}); going on")
            return None
        if task.cancelled():
            return None
        if (err := task.exception()) is not None:
            self.overruns.append(Overrun(name, budget, f"failed: {err!r}"))
            self._say(f"stop: {name} failed ({err!r}); going on")
            return None
        return task.result()

    def note(self, step: str, text: str) -> None:
        """Say ``text`` after ``step``'s figure in :meth:`summary` (e.g. the parts of its time); empty: nothing."""
        if text:
            self.notes[step] = text

    def summary(self) -> str:
        """``stop took 1.42s: servers 1.20s (server instances 1.00s, then stub_model 0.15s), head server
        0.01s, ...``: the whole stop, then each step of 5 ms or more with its :meth:`note`."""
        steps = ", ".join(
            f"{name} {s:.2f}s" + (f" ({self.notes[name]})" if name in self.notes else "")
            for name, s in self.timings
            if s >= 0.005
        )
        return f"stop took {time.monotonic() - self._t0:.2f}s" + (f": {steps}" if steps else "")

    def _backstop(self) -> None:
        """The whole stop overran: say where it was, dump every stack, kill what is left, exit 3."""
        sys.stderr.write(
            f"stop: not finished after {self.hard_deadline_s:g}s (in step: {self.current}); "
            "killing every server process group and exiting (3); stacks follow\n"
        )
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        for pgid in list(self._groups()):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
        os._exit(UNCLEAN_EXIT_CODE)
