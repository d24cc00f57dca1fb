"""The verdict a router asks a replica's handle for after a request was cut
(``ReplicaLauncher.lost_since``, docs/scale-out.md "Node loss"): no Ray needed, the handle's
record of its server's ends is set as the handle sets it."""

from __future__ import annotations

import asyncio
import time

from gym_runtime.placement.remote import ReplicaLauncher


def launcher() -> ReplicaLauncher:
    return ReplicaLauncher(None, None, {}, None, None)  # type: ignore[arg-type]


def test_a_loss_declared_after_a_long_wait_is_still_the_verdict() -> None:
    """The request was sent long before its node died: the wait for the verdict counts from the
    cut, not from the send (a row holding 20 s got GR-PLACE-NO-REPLICA instead)."""
    lz = launcher()

    async def scenario() -> dict | None:
        sent = time.monotonic() - 20  # the row had been out for 20 s when its connection was cut

        async def declare() -> None:
            await asyncio.sleep(1.0)  # the heartbeat declares the loss a second after the cut
            lz.ended_at = time.monotonic()
            lz.loss = {"at": lz.ended_at, "node": "127.0.0.1 (deadbeef)", "node_id": "deadbeef"}

        task = asyncio.create_task(declare())
        verdict = await lz.lost_since(sent)
        await task
        return verdict

    assert asyncio.run(scenario())["node"] == "127.0.0.1 (deadbeef)"


def test_an_end_that_is_no_loss_or_an_older_loss_is_no_verdict() -> None:
    lz = launcher()
    lz.loss = {"at": time.monotonic() - 30, "node": "127.0.0.1 (0ld0ld00)", "node_id": "0ld"}
    lz.ended_at = time.monotonic()  # it ended since (a crash), but its node was lost before the request

    assert asyncio.run(lz.lost_since(time.monotonic() - 1)) is None


def test_a_call_that_fails_as_its_wait_is_cancelled_leaves_no_unretrieved_error() -> None:
    """A heartbeat's ping failing (its node gone) in the moment its wait was cancelled (the call it
    watched had ended) left Ray's error unretrieved: asyncio printed "exception was never retrieved"
    and a traceback on the daemon's stderr after a node's loss."""
    import gc

    from gym_runtime.placement.liveness import ray_call

    unretrieved: list[dict] = []

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: unretrieved.append(ctx))
        reply = asyncio.get_running_loop().create_future()
        wait = asyncio.ensure_future(ray_call(reply, 5))
        await asyncio.sleep(0)  # the wait is waiting
        reply.set_exception(RuntimeError("the actor is unavailable"))
        wait.cancel()  # in the same step: the watched call ended
        await asyncio.gather(wait, return_exceptions=True)
        del reply, wait
        gc.collect()

    asyncio.run(scenario())
    assert unretrieved == []
