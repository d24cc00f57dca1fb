"""The rollout path prefix NeMo Gym 0.7 puts in front of a server's routes.

A caller that correlates its calls with a rollout sends them to ``/ng-rollout/<rollout_id>/...``
(evaluation capture) or ``/ng-rollout/<rollout_id>/training-token-capture/...`` (training-token
capture): NeMo Gym 0.7.0 ``nemo_gym/server_utils.py`` (``rollout_path_prefix``),
``nemo_gym/rollout_correlation.py`` (``RolloutContextMiddleware``, the id pattern). Every built-in
server strips the prefix before routing, so ``/ng-rollout/3-0/v1/responses`` is ``/v1/responses``,
and keeps what it said in the request's state: ``request.state.rollout_id`` (None without a
prefix) and ``request.state.token_capture`` (True under the capture segment). A path that starts
with ``/ng-rollout/`` but carries no valid id is left as it is (and so answered 404).
"""

from __future__ import annotations

import re
from typing import Any

PREFIX = "ng-rollout"
CAPTURE_SEGMENT = "training-token-capture"
# NeMo Gym 0.7.0's ROLLOUT_ID_PATTERN: a path segment that is also a file name component
ROLLOUT_ID = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_ID = re.compile(rf"^{ROLLOUT_ID}$")
_PATH = re.compile(rf"^/{PREFIX}/(?P<rollout_id>{ROLLOUT_ID})(?P<capture>/{CAPTURE_SEGMENT})?(?P<rest>/.*)$")


def split(path: str) -> tuple[str | None, bool, str]:
    """``(rollout id or None, under the capture segment, the path without the prefix)``."""
    match = _PATH.match(path)
    if match is None:
        return None, False, path
    return match.group("rollout_id"), match.group("capture") is not None, match.group("rest")


def prefix(rollout_id: str | None, token_capture: bool = False) -> str:
    """The prefix for ``rollout_id`` (``""`` for None), as Gym's ``rollout_path_prefix`` builds it."""
    if not rollout_id:
        return ""
    return f"/{PREFIX}/{rollout_id}" + (f"/{CAPTURE_SEGMENT}" if token_capture else "")


def row_rollout_id(row: dict) -> str | None:
    """A row's capture id, as NeMo Gym 0.7.0's ``maybe_rollout_id_from_run_body``: ``_ng_rollout_id``
    (when it is a valid id), else ``<_ng_task_index>-<_ng_rollout_index>``, with ``-a<N>`` for an
    ``_ng_attempt_index`` N > 0; None when the row carries neither."""
    explicit = row.get("_ng_rollout_id")
    if isinstance(explicit, str) and _ID.match(explicit):
        rollout_id = explicit
    elif explicit is None and _whole(row.get("_ng_task_index")) and _whole(row.get("_ng_rollout_index")):
        rollout_id = f"{row['_ng_task_index']}-{row['_ng_rollout_index']}"
    else:
        return None
    attempt = row.get("_ng_attempt_index")
    return f"{rollout_id}-a{attempt}" if _whole(attempt) and attempt > 0 else rollout_id


def capture_enabled(global_config: dict, agent_flag: bool) -> bool:
    """Whether an agent's model calls go under the training-token-capture prefix (NeMo Gym 0.7.0
    ``base_responses_api_agent.py``): ``token_id_capture.enabled`` and either its own
    ``token_id_capture: true`` or the run-wide ``token_id_capture.all_agents``."""
    block = global_config.get("token_id_capture") or {}
    return isinstance(block, dict) and bool(block.get("enabled")) and (agent_flag or bool(block.get("all_agents")))


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class RolloutPathMiddleware:
    """Pure ASGI middleware doing the stripping of the module doc (streamed answers pass untouched)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        rollout_id, capture, rest = split(scope.get("path", ""))
        state = dict(scope.get("state") or {})
        state.update(rollout_id=rollout_id, token_capture=capture)
        scope = {**scope, "state": state}
        if rollout_id is not None:
            scope.update(path=rest, raw_path=rest.encode())
        await self.app(scope, receive, send)
