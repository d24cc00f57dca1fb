"""Cancel a request whose client went away before its answer was complete.

uvicorn keeps running a handler after its client disconnected, so a rollout the daemon cancelled
(its ``/rollouts/run`` client disconnected, a batch deadline passed) would keep calling the policy
and the resources server until it finished. :class:`CancelOnDisconnect` wraps the app: once the
request body is read it listens for ASGI's ``http.disconnect`` (uvicorn sends it when the
connection closes, ASGI HTTP spec 2.3) and cancels the handler if its answer is not complete yet;
the handler's own outgoing calls are closed with it, so the cancellation travels on from the agent
to the model server and its upstream. A cancelled request sends nothing (nobody is listening).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

Message = dict[str, Any]
DISCONNECT: Message = {"type": "http.disconnect"}


class CancelOnDisconnect:
    """ASGI middleware around ``app`` (any ASGI app; only ``http`` scopes are watched)."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        inbox: asyncio.Queue[Message] = asyncio.Queue()
        state = {"complete": False, "gone": False}

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                state["complete"] = True
            await send(message)

        async def receiving() -> Message:
            if state["gone"] and inbox.empty():
                return DISCONNECT
            return await inbox.get()

        handler = asyncio.ensure_future(self.app(scope, receiving, sending))

        async def listen() -> None:
            while True:
                message = await receive()
                await inbox.put(message)
                if message["type"] == "http.disconnect":
                    state["gone"] = True
                    if not state["complete"]:
                        handler.cancel()
                    return

        listener = asyncio.ensure_future(listen())
        try:
            await handler
        except asyncio.CancelledError:
            if not (state["gone"] and handler.cancelled()):
                raise  # our own task was cancelled (server shutdown): pass it on
        finally:
            listener.cancel()
            if not handler.done():
                handler.cancel()
