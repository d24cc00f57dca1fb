"""Gym's row keys beyond ``agent_ref``: ``task_source``, ``_ng_*`` stamps, materialized tasks and episodes.

From NeMo Gym 0.7.0 (``nemo_gym/global_config.py``, ``nemo_gym/episode_types.py``,
``nemo_gym/task_materialization.py``, ``nemo_gym/rollout_correlation.py``,
``nemo_gym/rollout_collection.py``):

* ``task_source``: the config instance that declares the row's dataset (resolved to an agent by
  :mod:`.routing`);
* stamps the collector writes and reads back: ``_ng_task_index``, ``_ng_rollout_index`` (stamped
  on every row it sends where the row has none, and read by environment servers:
  ``single_agent_turn_legacy`` names the episode after them), ``_ng_attempt_index`` (whole numbers >= 0), ``_ng_rollout_id`` (letters, digits, ``.``, ``_``, ``-``,
  starting with a letter or digit), ``_ng_environment_server`` (the environment server that runs
  the row); any other ``_ng_*`` key is passed through unread;
* a **materialized task** is a row with ``task_id: {taskset, task_id}`` (two non-empty strings)
  and ``task_input`` (a mapping): it is sent to an environment server as an episode request
  ``{"episode_id": {"rollout_id", "attempt"}, "task": {"task_id", "task_input"}}``, whose answer is
  ``{"episode_id", "task_id", "result" | "failure"}``. A ``result`` is the rollout's record (its
  top-level ``reward`` scores it; ``mask_sample``, ``failure_kind``, ``failure_reason`` kept as
  sent); a ``failure`` (``failure_reason``, ``terminal``, ``failure_kind``?, ``stage``?) is the row
  error ``GR-ROLLOUT-EPISODE-FAILED``, with those fields kept beside it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

TASK_SOURCE = "task_source"
TASK_INDEX = "_ng_task_index"
ROLLOUT_INDEX = "_ng_rollout_index"
ATTEMPT_INDEX = "_ng_attempt_index"
ROLLOUT_ID = "_ng_rollout_id"
ENVIRONMENT_SERVER_STAMP = "_ng_environment_server"
RESULT_TYPE_STAMP = "_ng_result_type"
TASK_ID_STAMP = "_ng_task_id"
EPISODE_FAILED = "GR-ROLLOUT-EPISODE-FAILED"
FAILURE_FIELDS = ("failure_reason", "failure_kind", "terminal", "stage")
_ROLLOUT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_INDEXES = (TASK_INDEX, ROLLOUT_INDEX, ATTEMPT_INDEX)


def is_materialized(row: Mapping[str, Any]) -> bool:
    """A row shaped as a materialized task: ``task_id`` a mapping and a ``task_input`` (its
    contents are checked by :func:`stamp_problems`, as Gym routes a malformed one as a task)."""
    return isinstance(row.get("task_id"), Mapping) and "task_input" in row


def materialized_taskset(row: Mapping[str, Any]) -> str | None:
    """The taskset of a materialized task row (None: not one, or no usable taskset)."""
    if not is_materialized(row):
        return None
    taskset = row["task_id"].get("taskset")
    return taskset if isinstance(taskset, str) and taskset else None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def stamp_problems(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, what is wrong)`` for each bad stamp or materialized-task field of ``row``."""
    out = [(k, f"must be a whole number >= 0, got {row[k]!r}") for k in _INDEXES if k in row and not _whole(row[k])]
    if ROLLOUT_ID in row and not (isinstance(row[ROLLOUT_ID], str) and _ROLLOUT_ID.match(row[ROLLOUT_ID])):
        out.append(
            (
                ROLLOUT_ID,
                f"must be letters, digits, '.', '_' or '-', starting with a letter or digit, got {row[ROLLOUT_ID]!r}",
            )
        )
    if ENVIRONMENT_SERVER_STAMP in row and not isinstance(row[ENVIRONMENT_SERVER_STAMP], str):
        out.append(
            (ENVIRONMENT_SERVER_STAMP, f"must name an environment server, got {row[ENVIRONMENT_SERVER_STAMP]!r}")
        )
    if is_materialized(row):
        for key in ("taskset", "task_id"):
            value = row["task_id"].get(key)
            if not isinstance(value, str) or not value:
                out.append((f"task_id.{key}", f"must be a non-empty string, got {value!r}"))
        extra = sorted(set(row["task_id"]) - {"taskset", "task_id"})
        if extra:
            out.append(("task_id", f"has keys a task id does not take: {', '.join(map(str, extra))}"))
        if not isinstance(row["task_input"], Mapping):
            out.append(("task_input", f"must be a mapping, got {type(row['task_input']).__name__}"))
    return out


def rollout_id(row: Mapping[str, Any], task_index: int, rollout_index: int) -> str:
    """The episode's ``rollout_id``: ``_ng_rollout_id``, else ``"<task>-<rollout>"`` from the stamps,
    or from ``task_index`` / ``rollout_index`` (the row's place in the dataset, the sample) where the
    row has none (NeMo Gym 0.7.0 ``maybe_rollout_id_from_run_body``, without the attempt suffix: the
    attempt travels in ``episode_id.attempt``)."""
    if isinstance(row.get(ROLLOUT_ID), str):
        return row[ROLLOUT_ID]
    return f"{row.get(TASK_INDEX, task_index)}-{row.get(ROLLOUT_INDEX, rollout_index)}"


def with_indexes(row: Mapping[str, Any], task_index: int, rollout_index: int) -> dict[str, Any]:
    """A flat row as an environment server takes it: ``_ng_task_index`` / ``_ng_rollout_index``
    set to ``task_index`` / ``rollout_index`` where the row has none (its own are kept), as NeMo Gym
    0.7.0's collector stamps every row before sending it (``rollout_collection.py``)."""
    return {TASK_INDEX: task_index, ROLLOUT_INDEX: rollout_index, **row}


def episode_request(row: Mapping[str, Any], task_index: int, rollout_index: int) -> dict[str, Any]:
    """The body an environment server's ``/run`` takes for a materialized task (``BaseEpisodeRequest``)."""
    return {
        "episode_id": {"rollout_id": rollout_id(row, task_index, rollout_index), "attempt": row.get(ATTEMPT_INDEX, 0)},
        "task": {"task_id": row["task_id"], "task_input": row["task_input"]},
    }


def episode_record(server: str, reply: Any) -> dict[str, Any]:
    """An environment server's answer to an episode request as the row's result: the ``result``
    with ``_ng_task_id``, or for a ``failure`` the row error :data:`EPISODE_FAILED` with the
    failure's fields beside it; an answer of another shape is ``GR-ROLLOUT-BAD-JSON``."""
    shaped = (
        isinstance(reply, Mapping)
        and isinstance(reply.get("episode_id"), Mapping)
        and isinstance(reply.get("task_id"), Mapping)
        and (reply.get("result") is None) != (reply.get("failure") is None)
    )
    if not shaped:
        return {
            "error": {
                "code": "GR-ROLLOUT-BAD-JSON",
                "message": f"{server}: the answer to an episode request is "
                "not {episode_id, task_id, result | failure} (exactly one of result and failure)",
            }
        }
    failure = reply.get("failure")
    if failure is not None:
        if not isinstance(failure, Mapping):
            return {
                "error": {"code": "GR-ROLLOUT-BAD-JSON", "message": f"{server}: the episode's failure is not an object"}
            }
        reason = str(failure.get("failure_reason", ""))[:2000]
        kind = f" ({failure['failure_kind']})" if isinstance(failure.get("failure_kind"), str) else ""
        return {
            "error": {"code": EPISODE_FAILED, "message": f"{server}: the episode failed{kind}: {reason}"},
            TASK_ID_STAMP: reply["task_id"],
            **{k: failure[k] for k in FAILURE_FIELDS if k in failure},
        }
    result = reply["result"]
    if not isinstance(result, Mapping):
        return {"error": {"code": "GR-ROLLOUT-BAD-JSON", "message": f"{server}: the episode's result is not an object"}}
    return {**result, TASK_ID_STAMP: reply["task_id"]}
