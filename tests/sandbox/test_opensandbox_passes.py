"""The environment's passes (sandbox/opensandbox/passes.py): every question asked between two passes
is answered in the next one, at most ``at_once`` calls in flight, a failure or a call past its
bound reaches its own asker only."""

from __future__ import annotations

import asyncio

import pytest

from sandbox.opensandbox.passes import Passes


def test_questions_of_many_askers_are_answered_in_one_pass_each_interval() -> None:
    async def run() -> tuple[list[int], int, int, int]:
        passes = Passes(every_s=0.2, at_once=3, call_s=5.0)
        flight = {"now": 0, "most": 0}

        async def call(i: int) -> int:
            flight["now"] += 1
            flight["most"] = max(flight["most"], flight["now"])
            await asyncio.sleep(0.01)
            flight["now"] -= 1
            return i

        async def asker(i: int) -> list[int]:
            return [await passes.ask(lambda: call(i)) for _ in range(3)]

        out = await asyncio.gather(*(asker(i) for i in range(10)))
        await passes.close()
        return [x for xs in out for x in xs], passes.calls, passes.passes, flight["most"]

    answers, calls, n_passes, most = asyncio.run(run())
    assert sorted(answers) == sorted(list(range(10)) * 3)
    assert calls == 30 and n_passes == 3 and most == 3  # 10 servers, 3 rounds: 3 passes, 3 calls at once


def test_a_failure_and_a_call_past_its_bound_reach_their_asker_only() -> None:
    async def run() -> tuple[object, object, object]:
        passes = Passes(every_s=0.05, at_once=4, call_s=0.2)

        async def boom() -> None:
            raise ConnectionError("execd gone")

        async def hang() -> None:
            await asyncio.sleep(10)

        async def fine() -> str:
            return "ok"

        out = await asyncio.gather(passes.ask(boom), passes.ask(hang), passes.ask(fine), return_exceptions=True)
        await passes.close()
        return tuple(out)

    boom, hang, fine = asyncio.run(run())
    assert isinstance(boom, ConnectionError) and isinstance(hang, TimeoutError) and fine == "ok"


def test_close_ends_what_still_waits() -> None:
    async def run() -> None:
        passes = Passes(every_s=30.0)
        waiting = asyncio.ensure_future(passes.ask(lambda: asyncio.sleep(0)))
        await asyncio.sleep(0.05)
        await passes.close()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(run())
