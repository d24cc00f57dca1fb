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
