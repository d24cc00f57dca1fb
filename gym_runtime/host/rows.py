"""A host-mode ``POST /rollouts/run`` answer: results joined back to their rows by ``_rowidx``.

A trainer posts rows that each carry ``_rowidx`` (NeMo RL's row identity) and joins the results on
it, since a host may finish rows in any order and a batch may be cut by its deadline. The shape
(docs/runtime.md, "Host mode"; NMP's sandboxed Gym host answers ``{"results": [...]}`` the same way):

``{"results": [result, ...], "unfinished": [{"_rowidx", "error"}, ...], "summary": {...}, "error"?}``

* ``results``: one per row that finished, in row order, each the agent's answer (or its row error
  ``{"error": {"code", "message", "status"}}``) with the row's ``_rowidx`` set on it (the host's pairing wins
  over anything the agent echoed), and the row's ``_sg_example_id``, ``_ng_task_index`` and
  ``_ng_rollout_index`` where the answer has none (NMP's trainer joins on ``_sg_example_id``);
* ``unfinished``: one per row the rollout deadline cut (``GR-ROLLOUT-DEADLINE``), or the daemon's
  shutdown (``GR-ROLLOUT-SHUTDOWN``), in row order;
* ``error``: that code when rows were cut, saying how many rows finished.

A row without ``_rowidx`` is given its position in the batch. ``_rowidx`` must be an integer or a
string, one per row: :func:`row_keys` raises ``ValueError`` otherwise (the head answers 400
``GR-ROLLOUT-BAD-REQUEST``).
"""

from __future__ import annotations

from typing import Any

from gym_runtime.rollouts.dispatch import row_error

ROW_KEY = "_rowidx"
CARRIED = ("_sg_example_id", "_ng_task_index", "_ng_rollout_index")


def row_keys(rows: list[Any]) -> list[int | str]:
    """The ``_rowidx`` of every row (its position when it has none); ``ValueError`` naming the first
    row whose key is not an integer or a string, or every key two rows share."""
    keys: list[int | str] = []
    for i, row in enumerate(rows):
        key = row.get(ROW_KEY, i) if isinstance(row, dict) else i
        if isinstance(key, bool) or not isinstance(key, (int, str)):
            raise ValueError(f"examples[{i}].{ROW_KEY} must be an integer or a string, got {type(key).__name__}")
        keys.append(key)
    if len(set(keys)) != len(keys):
        seen: set[int | str] = set()
        dup = sorted({repr(k) for k in keys if k in seen or seen.add(k)})  # type: ignore[func-returns-value]  # set.add returns None: the first sighting of a key is not a duplicate
        raise ValueError(
            f"{ROW_KEY} must be unique within a batch (a row without one counts as its position): "
            f"{', '.join(dup)} appear(s) more than once"
        )
    return keys


def joined(result: dict[str, Any], row: Any, key: int | str) -> dict[str, Any]:
    """``result`` with ``_rowidx`` = ``key`` and the row's :data:`CARRIED` identity where it has none."""
    out = dict(result)
    if isinstance(row, dict):
        for name in CARRIED:
            if name in row and out.get(name) is None:
                out[name] = row[name]
    out[ROW_KEY] = key
    return out


def keyed_answer(
    rows: list[Any],
    keys: list[int | str],
    finished: list[dict[str, Any] | None],
    deadline_s: float | None,
    summary: dict[str, Any] | None,
    shutdown: bool = False,
) -> dict[str, Any]:
    """The answer (module doc) of a batch whose row ``i`` ended with ``finished[i]`` (None: cut by
    the deadline of ``deadline_s`` seconds, or with ``shutdown`` by the daemon's shutdown: then
    the code is ``GR-ROLLOUT-SHUTDOWN`` and there is no ``summary``)."""
    results = [joined(r, rows[i], keys[i]) for i, r in enumerate(finished) if r is not None]
    cut = [i for i, r in enumerate(finished) if r is None]
    code, why = (
        ("GR-ROLLOUT-SHUTDOWN", "the daemon shut down")
        if shutdown
        else ("GR-ROLLOUT-DEADLINE", f"the rollout deadline of {deadline_s:g}s passed")
    )
    answer: dict[str, Any] = {
        "results": results,
        "unfinished": [{ROW_KEY: keys[i], **row_error(code, f"{why} before this row finished")} for i in cut],
    }
    if summary is not None:
        answer["summary"] = summary
    if cut:
        answer["error"] = {
            "code": code,
            "message": (
                f"{why}: {len(results)} of {len(rows)} row(s) finished (in results); the other {len(cut)} were "
                "cancelled (in unfinished)"
            ),
        }
    return answer
