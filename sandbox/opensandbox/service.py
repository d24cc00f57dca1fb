"""The OpenSandbox server as the daemon uses it: its version, a run's sandboxes by label, their
deletion and TTL renewal (docs/runtime.md, "Sandbox backends").

Calls go through the ``opensandbox`` SDK's ``SandboxManager`` (list by metadata, kill, renew);
``GET /version`` is asked with httpx because the SDK has no call for it (opensandbox 1.1.1).
Every SDK failure comes back as a ``GR-OSB-*`` error (:mod:`.failures`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import httpx

from .connection import OpenSandboxConnection
from .failures import translate, unreachable
from .spec import LABEL_OWNER, LABEL_RUN, TTL_S, RunLabels

log = logging.getLogger("sandbox.opensandbox")
PAGE = 100
RENEW_AT_ONCE = 8  # renewals of one pass in flight at once


def leftovers(infos: Iterable[Any], labels: RunLabels) -> list[str]:
    """Ids among ``infos`` (the SDK's ``SandboxInfo``: ``id``, ``metadata``) that carry this slot's
    owner label and another run's id: what a daemon of this slot that died left behind."""
    out = []
    for info in infos:
        meta = info.metadata or {}
        if meta.get(LABEL_OWNER) == labels.owner and meta.get(LABEL_RUN) != labels.run:
            out.append(info.id)
    return out


class SandboxService:
    """One connection to the server for the daemon's life. ``await close()`` at the end."""

    def __init__(self, conn: OpenSandboxConnection) -> None:
        self.conn = conn
        self._manager: Any = None

    async def _mgr(self) -> Any:
        from opensandbox import SandboxManager

        if self._manager is None:
            self._manager = await SandboxManager.create(self.conn.sdk_config())
        return self._manager

    async def version(self) -> str:
        """The server's package version (``GET /version``, no key needed); raises ``GR-OSB-UNREACHABLE``."""
        try:
            async with httpx.AsyncClient(timeout=10.0) as client:
                r = await client.get(f"{self.conn.url}/version")
                r.raise_for_status()
                return str(r.json().get("version", "?"))
        except (httpx.HTTPError, ValueError) as e:
            raise unreachable(self.conn, "asking for its version", f"{type(e).__name__}: {e}") from None

    async def told_version(self) -> str | None:
        """What the server says its version is, for an error message: ``GET /version``'s, else a
        ``version`` in ``GET /health``'s answer, else None (it says none, or does not answer). Never raises."""
        async with httpx.AsyncClient(timeout=10.0) as client:
            for path in ("/version", "/health"):
                try:
                    r = await client.get(f"{self.conn.url}{path}")
                    told = r.json().get("version") if r.status_code == 200 else None
                except (httpx.HTTPError, ValueError, AttributeError):
                    continue
                if isinstance(told, (str, int, float)) and str(told).strip():
                    return str(told).strip()[:60]
        return None

    async def list_ids(self, metadata: dict[str, str], what: str) -> list[Any]:
        """Every sandbox (``SandboxInfo``) whose metadata holds ``metadata``; raises ``GR-OSB-*``."""
        from opensandbox.models.sandboxes import SandboxFilter

        mgr, out, page = await self._mgr(), [], 1
        try:
            while True:
                paged = await mgr.list_sandbox_infos(SandboxFilter(metadata=metadata, page=page, page_size=PAGE))
                out += list(paged.sandbox_infos)
                if not paged.pagination.has_next_page:
                    return out
                page += 1
        except Exception as e:
            raise translate(e, self.conn, what) from None

    async def kill(self, ids: Iterable[str], what: str) -> list[str]:
        """Delete ``ids`` (four at a time); a sandbox already gone counts as deleted. Returns the ids
        deleted; raises ``GR-OSB-*`` for the first other failure once all were tried."""
        from opensandbox.exceptions import SandboxApiException

        mgr, gate, first = await self._mgr(), asyncio.Semaphore(4), []

        async def one(sid: str) -> str:
            async with gate:
                try:
                    await mgr.kill_sandbox(sid)
                except SandboxApiException as e:
                    if e.status_code != 404:
                        first.append(translate(e, self.conn, what, sid))
                except Exception as e:
                    first.append(translate(e, self.conn, what, sid))
                return sid

        done = await asyncio.gather(*(one(i) for i in ids))
        if first:
            raise first[0]
        return list(done)

    async def reap(self, labels: RunLabels) -> list[str]:
        """Delete what a dead daemon of this slot left (:func:`leftovers`); returns their ids."""
        infos = await self.list_ids(labels.owner_filter(), "listing this state slot's sandboxes")
        ids = leftovers(infos, labels)
        if ids:
            await self.kill(ids, "deleting sandboxes a stopped daemon left")
        return ids

    async def delete_run(self, labels: RunLabels) -> list[str]:
        """Delete every sandbox of this run (found by its run label); returns their ids."""
        infos = await self.list_ids({LABEL_RUN: labels.run}, "listing this run's sandboxes")
        return await self.kill([i.id for i in infos], "deleting this run's sandboxes")

    async def renew(self, ids: Iterable[str]) -> int:
        """Push each sandbox's expiry to now + :data:`~.spec.TTL_S`, in one pass for all of them
        (:data:`RENEW_AT_ONCE` calls at a time); returns how many were renewed. Failures are
        logged (the next pass tries again; a sandbox gone is seen by its process watch)."""
        mgr, gate, done = await self._mgr(), asyncio.Semaphore(RENEW_AT_ONCE), []

        async def one(sid: str) -> None:
            async with gate:
                try:
                    await mgr.renew_sandbox(sid, timedelta(seconds=TTL_S))
                    done.append(sid)
                except Exception as e:  # never the key: the SDK's messages hold no headers
                    log.warning("renewing the TTL of sandbox %s failed: %s", sid, type(e).__name__)

        await asyncio.gather(*(one(i) for i in dict.fromkeys(ids)))
        return len(done)

    async def close(self) -> None:
        if self._manager is not None:
            await self._manager.close()
            self._manager = None
