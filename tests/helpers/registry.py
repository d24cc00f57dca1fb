"""Whether the package registry can be reached (for tests marked ``pypi``)."""

from __future__ import annotations

import functools
import os

import httpx


@functools.cache
def registry_reachable(timeout_s: float = 5.0) -> bool:
    """True when the index uv would use answers ``GET <index>/pip/`` within ``timeout_s``.

    ``GYM_RUNTIME_TESTS_OFFLINE=1`` forces False (to exercise the skip path).
    """
    if os.environ.get("GYM_RUNTIME_TESTS_OFFLINE") == "1":
        return False
    index = (os.environ.get("UV_INDEX_URL") or os.environ.get("UV_DEFAULT_INDEX") or "https://pypi.org/simple").rstrip(
        "/"
    )
    try:
        r = httpx.get(f"{index}/pip/", timeout=timeout_s, follow_redirects=True)
        return r.status_code < 500
    except httpx.HTTPError:
        return False
