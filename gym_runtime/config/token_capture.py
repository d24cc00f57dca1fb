"""Training-token capture (NeMo Gym 0.7's ``token_id_capture`` block) under gym-runtime
(docs/rollouts.md, "Training-token capture").

NeMo Gym writes the token ids of every captured model call into ``token_id_capture.dir``, a
node-local directory the model servers write and the trainer reads (NeMo Gym 0.7.0
``nemo_gym/token_id_capture/config.py``). A package cannot choose a host directory (its servers
run sandboxed, and a path in a package is the author's machine), so the directory is the
operator's setting ``GYM_RUNTIME_TOKEN_CAPTURE_DIR`` (an absolute path, :mod:`gym_runtime.settings`):

- :func:`apply` writes it into the merged config as ``token_id_capture.dir`` (a directory the
  config named instead is replaced, with the warning ``GR-CONFIG-TOKEN-CAPTURE-DIR``); capture
  enabled (``token_id_capture.enabled``, e.g. the job's override ``token_id_capture.enabled=true``)
  with no such setting and no custom ``sink`` is the error ``GR-CONFIG-TOKEN-CAPTURE-DIR``;
- :func:`writable_dir`: the directory, created if missing, that every model server
  (``responses_api_models``) gets read-write in its sandbox while capture is enabled;
- :func:`passed`: the control token variable (``token_id_capture.control_auth_token_env``, by
  default ``NEMO_GYM_TOKEN_CAPTURE_CONTROL_TOKEN``; NeMo Gym's model servers read it for the
  capture-ledger routes of ``external_staging``) handed from the daemon's environment to the model
  servers, by name only (never on a command line), when it is set there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gym_runtime.errors import Violation

BLOCK = "token_id_capture"
SETTING = "GYM_RUNTIME_TOKEN_CAPTURE_DIR"
CONTROL_TOKEN_VAR = "NEMO_GYM_TOKEN_CAPTURE_CONTROL_TOKEN"
MODEL_SERVERS = "responses_api_models"


def _block(data: dict) -> dict:
    """The config's ``token_id_capture`` block, ``{}`` when it has none (or not a mapping)."""
    block = data.get(BLOCK)
    return block if isinstance(block, dict) else {}


def enabled(data: dict) -> bool:
    """Whether the merged config turns training-token capture on."""
    block = _block(data)
    return bool(block and block.get("enabled") is True)


def apply(data: dict, sources: Any, directory: Path | None) -> tuple[list[Violation], list[Violation]]:
    """Set ``token_id_capture.dir`` in ``data`` (in place) from the operator's ``directory``;
    returns ``(errors, warnings)`` (module doc)."""
    block = _block(data)
    key = f"{BLOCK}.dir"
    if directory is None:
        if enabled(data) and not block.get("sink"):
            return [
                Violation(
                    "GR-CONFIG-TOKEN-CAPTURE-DIR",
                    "token_id_capture is enabled, but the operator set no "
                    f"directory for it ({SETTING}): the model servers could write the token ids nowhere "
                    "(a directory in the config is not used)",
                    file=sources.of(f"{BLOCK}.enabled"),
                    key=f"{BLOCK}.enabled",
                    hint=f"set {SETTING} to an absolute directory the trainer reads (node-local), or "
                    "turn token_id_capture off",
                )
            ], []
        return [], []
    warnings = []
    if block and block.get("dir") not in (None, str(directory)):
        warnings.append(
            Violation(
                "GR-CONFIG-TOKEN-CAPTURE-DIR",
                f"token_id_capture.dir {block['dir']!r} is replaced by the operator's {SETTING} ({directory})",
                file=sources.of(key),
                key=key,
                hint="remove token_id_capture.dir from the config: where token ids are written "
                "is the operator's setting",
            )
        )
    data[BLOCK] = {**(block or {}), "dir": str(directory)}
    return [], warnings


def writable_dir(data: dict, server_type: str) -> list[Path]:
    """``[directory]`` for a model server while capture is enabled (created if missing), else ``[]``."""
    block = _block(data)
    if server_type != MODEL_SERVERS or not enabled(data) or not block.get("dir") or block.get("sink"):
        return []
    path = Path(block["dir"])
    path.mkdir(parents=True, exist_ok=True)
    return [path]


def passed(data: dict, server_type: str, environ: dict) -> dict[str, str]:
    """``{control token variable: value}`` for a model server while capture is enabled and the
    variable is set in the daemon's environment, else ``{}``."""
    block = _block(data)
    if server_type != MODEL_SERVERS or not enabled(data):
        return {}
    name = block.get("control_auth_token_env") or CONTROL_TOKEN_VAR
    return {name: environ[name]} if isinstance(name, str) and environ.get(name) else {}
