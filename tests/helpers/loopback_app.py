"""An ASGI app served by a real uvicorn on a free loopback port, in a thread, for tests that need a
server to answer over HTTP (an agent, an environment server).

``with serving(app) as url:`` yields ``http://127.0.0.1:<port>`` once uvicorn has started, and asks
it to exit on leaving (waiting up to 5 s for it).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` served on ``127.0.0.1``; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(5)
