"""Training-token capture into NeMo Gym 0.7's file store (docs/rollouts.md, "Training-token capture").

A model call that comes in under ``/ng-rollout/<rollout_id>/training-token-capture/`` while the
config's ``token_id_capture.enabled`` is true is recorded as one token entry of that rollout, in
the directory ``token_id_capture.dir`` (else the top-level ``model_call_capture_dir``), in the
layout NeMo Gym 0.7.0's ``TokenCaptureStore`` reads (``nemo_gym/token_id_capture/store.py``,
``records.py``; its consumer ``consumer.py`` ``trajectories_for_rollout`` builds the trajectory):

- ``<rollout_id>.tokens.intents``: the call's id, one line, appended before the upstream call; a
  call whose entry never comes is a dangling intent, and the consumer masks the rollout;
- ``<rollout_id>.tokens.jsonl``: one JSON object per call, appended and fsynced after its answer:
  ``schema_version: 1``, ``rollout_id``, ``model_call_id``, ``model``, ``prompt_token_ids``,
  ``generation_token_ids``, ``generation_log_probs``, ``output_items`` (the answer's items without
  the token arrays), ``token_item_index`` (the item that carried them), ``response_id`` (the id of
  the answer the caller got), ``created_at``, and the parent decision ``parent_resolution``:
  ``root`` for a request with no assistant turn yet, ``resolved`` with ``parent_call_id`` for the
  captured call of this rollout whose prompt + generation is the longest token prefix of this
  prompt (the consumer checks that prefix again), else ``unresolved`` (a fragment the consumer
  never joins by guessing);
- ``<rollout_id>.tokens.incomplete`` and the ``incomplete`` flag of ``<rollout_id>.tokens.state.json``:
  a call that could not be recorded (no token ids in the answer, a write that failed);
- ``<rollout_id>.tokens.lock``: every write holds ``flock`` on it, as the store does.

A rollout the consumer has frozen (its state says ``frozen`` or ``retired``) is never written again.
Entries hold full prompts (``prompt_is_delta: false``). Nothing here raises into the model call: a
capture failure is said on stderr and marks the rollout incomplete.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _kit.rollout_path import ROLLOUT_ID

TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
_ID = re.compile(rf"^{ROLLOUT_ID}$")


def capture_dir(global_config: dict) -> Path | None:
    """The store directory when training-token capture is on (``token_id_capture.enabled``), else None.

    Raises ``ValueError`` for what this writer cannot honour: a relative directory, none at all, a
    custom ``sink`` or ``external_staging`` (those belong to NeMo Gym's own model server).
    """
    block = global_config.get("token_id_capture") or {}
    if not isinstance(block, dict) or not block.get("enabled"):
        return None
    for key in ("sink", "external_staging"):
        if block.get(key):
            raise ValueError(
                f"token_id_capture.{key} is not supported by the built-in vllm_model (it writes NeMo "
                "Gym's file store); ship NeMo Gym's own vllm_model tree for it"
            )
    directory = block.get("dir") or global_config.get("model_call_capture_dir")
    if not directory:
        raise ValueError(
            "token_id_capture is enabled but names no directory (token_id_capture.dir; under "
            "gym-runtime the operator sets GYM_RUNTIME_TOKEN_CAPTURE_DIR)"
        )
    if not Path(str(directory)).is_absolute():
        raise ValueError(f"token_id_capture.dir must be an absolute path, not {directory!r}")
    return Path(str(directory))


def has_assistant_turn(items: list[Any]) -> bool:
    """True when a request's ``messages`` or ``input`` already holds model output."""
    for item in items or []:
        if not isinstance(item, dict):
            continue
        if item.get("role") == "assistant" or item.get("type") in ("function_call", "reasoning"):
            return True
    return False


def output_items(payload: dict) -> list[dict]:
    """The content-bearing items of a served answer (Responses ``output``, or chat ``choices``)."""
    if isinstance(payload.get("output"), list):
        return [i for i in payload["output"] if isinstance(i, dict)]
    return [{"type": "message", "role": "assistant", **(c.get("message") or {})} for c in payload.get("choices") or []]


class TokenCapture:
    """The writer for one rollout's calls in ``root`` (module doc)."""

    def __init__(self, root: Path, model: str) -> None:
        self.root, self.model = root, model

    def _path(self, rollout_id: str, suffix: str) -> Path:
        if not _ID.match(rollout_id):
            raise ValueError(f"invalid rollout id {rollout_id!r}")
        return self.root / f"{rollout_id}.tokens.{suffix}"

    @contextmanager
    def _locked(self, rollout_id: str):
        self.root.mkdir(parents=True, exist_ok=True)
        with self._path(rollout_id, "lock").open("a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _state(self, rollout_id: str) -> dict:
        path = self._path(rollout_id, "state.json")
        return json.loads(path.read_bytes()) if path.exists() else {}

    def _closed(self, rollout_id: str) -> bool:
        state = self._state(rollout_id)
        return bool(state.get("frozen") or state.get("retired"))

    @staticmethod
    def _append(path: Path, data: bytes) -> None:
        with path.open("ab") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())

    def begin(self, rollout_id: str) -> str | None:
        """Record the intent of a new call; its ``model_call_id``, or None when the rollout is closed."""
        call_id = uuid.uuid4().hex
        try:
            with self._locked(rollout_id):
                if self._closed(rollout_id):
                    _say(f"rollout {rollout_id} is frozen: call {call_id} is not captured")
                    return None
                self._append(self._path(rollout_id, "intents"), call_id.encode() + b"\n")
        except (OSError, ValueError) as exc:
            _say(f"cannot record the intent of a call of rollout {rollout_id}: {exc}")
            return None
        return call_id

    def _entries(self, rollout_id: str) -> list[dict]:
        path = self._path(rollout_id, "jsonl")
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]

    def commit(self, rollout_id: str, call_id: str, request_items: list[Any], payload: dict) -> None:
        """Write the entry of call ``call_id`` from the served ``payload`` (its token fields on one
        item); marks the rollout incomplete when it carries none or the write fails."""
        try:
            items = output_items(payload)
            carriers = [i for i, item in enumerate(items) if item.get("generation_token_ids") is not None]
            if len(carriers) != 1 or any(items[carriers[0]].get(f) is None for f in TOKEN_FIELDS):
                raise ValueError("the answer carries no complete token ids")
            tokens = {f: list(items[carriers[0]][f]) for f in TOKEN_FIELDS}
            entry = {
                "schema_version": 1,
                "rollout_id": rollout_id,
                "model_call_id": call_id,
                "model": self.model,
                **tokens,
                "output_items": [{k: v for k, v in item.items() if k not in TOKEN_FIELDS} for item in items],
                "token_item_index": carriers[0],
                "response_id": payload.get("id"),
                "created_at": time.time(),
                "prompt_is_delta": False,
            }
            with self._locked(rollout_id):
                if self._closed(rollout_id):
                    _say(f"rollout {rollout_id} was frozen before call {call_id} answered: not captured")
                    return
                entry.update(self._parent(rollout_id, tokens["prompt_token_ids"], request_items))
                line = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
                self._append(self._path(rollout_id, "jsonl"), line + b"\n")
        except (OSError, ValueError, TypeError) as exc:
            _say(f"cannot capture call {call_id} of rollout {rollout_id}: {exc}")
            self.incomplete(rollout_id, call_id)

    def _parent(self, rollout_id: str, prompt: list[int], request_items: list[Any]) -> dict:
        if not has_assistant_turn(request_items):
            return {"parent_resolution": "root", "parent_call_id": None}
        best, best_len = None, -1
        for entry in self._entries(rollout_id):
            if entry.get("prompt_is_delta"):
                continue
            cumulative = list(entry.get("prompt_token_ids") or []) + list(entry.get("generation_token_ids") or [])
            if best_len < len(cumulative) <= len(prompt) and prompt[: len(cumulative)] == cumulative:
                best, best_len = entry["model_call_id"], len(cumulative)
        if best is None:
            return {
                "parent_resolution": "unresolved",
                "parent_call_id": None,
                "parent_resolution_reason": "no captured call of the rollout is a token prefix of the prompt",
            }
        return {"parent_resolution": "resolved", "parent_call_id": best, "cum_len": None}

    def incomplete(self, rollout_id: str, call_id: str = "") -> None:
        """Mark the rollout incomplete: the sentinel line and the state flag (so it is masked)."""
        try:
            with self._locked(rollout_id):
                state = self._state(rollout_id)
                if state.get("retired"):
                    return
                state = {
                    "frozen": False,
                    "retired": False,
                    "snapshot_id": "",
                    "version": 0,
                    "entry_digests": {},
                    "indexed_size": 0,
                    **state,
                    "incomplete": True,
                }
                state["version"] = int(state.get("version", 0)) + 1
                with tempfile.NamedTemporaryFile(dir=self.root, prefix=".tokens-state-", delete=False) as tmp:
                    tmp.write(json.dumps(state, sort_keys=True).encode() + b"\n")
                    tmp.flush()
                    os.fsync(tmp.fileno())
                os.replace(tmp.name, self._path(rollout_id, "state.json"))
                self._append(self._path(rollout_id, "incomplete"), call_id.encode() + b"\n")
        except (OSError, ValueError) as exc:
            _say(f"cannot mark rollout {rollout_id} incomplete: {exc}")


def _say(message: str) -> None:
    print(f"token capture: {message}", file=sys.stderr, flush=True)
