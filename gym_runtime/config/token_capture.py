"""Training-token capture (NeMo Gym 0.7's ``token_id_capture`` block) under gym-runtime
(docs/rollouts.md, "Training-token capture").

NeMo Gym writes the token ids of every captured model call into ``token_id_capture.dir``, a
node-local directory the model servers write and the trainer reads (NeMo Gym 0.7.0
``nemo_gym/token_id_capture/config.py``); with a ``FileLineageStore`` as ``lineage_store`` (NeMo RL's
ledger mode) the model servers also write its ``lineage_store_kwargs.root``. Where those directories
are depends on who named them:

- **the job** (the global config layer of the process that started the runtime: NeMo RL's actor
  through :mod:`gym_runtime.nemo_gym`, NMP's host config): trusted, the trainer's choice, kept as
  given;
- **a package**: never a host directory (its servers run sandboxed, and a path in a package is the
  author's machine): ``dir`` is the operator's setting ``GYM_RUNTIME_TOKEN_CAPTURE_DIR`` (an absolute
  path, :mod:`gym_runtime.settings`), and a lineage ``root`` becomes ``<dir>/lineage``.

- :func:`apply` sets both in the merged config (a directory a package named is replaced, with the
  warning ``GR-CONFIG-TOKEN-CAPTURE-DIR``); capture enabled with no directory from the job or the
  operator and no custom ``sink`` is the error ``GR-CONFIG-TOKEN-CAPTURE-DIR``;
- :func:`writable_dir`: the directories, created if missing, that every model server
  (``responses_api_models``) gets read-write in its sandbox, at the same path, while capture is
  enabled (the servers that serve the capture routes and write the ledger);
- :func:`passed`: the control token variable (``token_id_capture.control_auth_token_env``, by
  default ``NEMO_GYM_TOKEN_CAPTURE_CONTROL_TOKEN``; NeMo Gym's model servers read it for the
  capture-ledger routes of ``external_staging``) handed from the daemon's environment to the model
  servers, by name only (never on a command line), when it is set there, and to no other server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gym_runtime.errors import Violation

BLOCK = "token_id_capture"
SETTING = "GYM_RUNTIME_TOKEN_CAPTURE_DIR"
CONTROL_TOKEN_VAR = "NEMO_GYM_TOKEN_CAPTURE_CONTROL_TOKEN"
MODEL_SERVERS = "responses_api_models"
LINEAGE_KWARGS = "lineage_store_kwargs"


def _block(data: dict) -> dict:
    """The config's ``token_id_capture`` block, ``{}`` when it has none (or not a mapping)."""
    block = data.get(BLOCK)
    return block if isinstance(block, dict) else {}


def enabled(data: dict) -> bool:
    """Whether the merged config turns training-token capture on."""
    block = _block(data)
    return bool(block and block.get("enabled") is True)


def _from_job(sources: Any, key: str, job_label: str | None) -> bool:
    return job_label is not None and sources.of(key) == job_label


def apply(
    data: dict, sources: Any, directory: Path | None, job_label: str | None = None
) -> tuple[list[Violation], list[Violation]]:
    """Set ``token_id_capture.dir`` and a lineage ``root`` in ``data`` (in place); returns
    ``(errors, warnings)`` (module doc). ``directory``: the operator's setting; ``job_label``: the
    source label of the job's config layer, whose paths are kept as given."""
    block = _block(data)
    key = f"{BLOCK}.dir"
    if block is not None and _from_job(sources, key, job_label) and isinstance(block.get("dir"), str):
        directory = Path(block["dir"])  # the trainer's choice (module doc)
    if directory is None:
        if enabled(data) and not block.get("sink"):
            return [
                Violation(
                    "GR-CONFIG-TOKEN-CAPTURE-DIR",
                    "token_id_capture is enabled, but neither the job nor the operator set a "
                    f"directory for it ({SETTING}): the model servers could write the token ids nowhere "
                    "(a directory in a package's config is not used)",
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
    block = {**(block or {}), "dir": str(directory)}
    root_key = f"{BLOCK}.{LINEAGE_KWARGS}.root"
    kwargs = block.get(LINEAGE_KWARGS)
    if isinstance(kwargs, dict) and "root" in kwargs and not _from_job(sources, root_key, job_label):
        lineage = str(directory / "lineage")
        if kwargs["root"] != lineage:
            warnings.append(
                Violation(
                    "GR-CONFIG-TOKEN-CAPTURE-DIR",
                    f"{root_key} {kwargs['root']!r} is replaced by {lineage} (under the token capture directory)",
                    file=sources.of(root_key),
                    key=root_key,
                    hint="remove lineage_store_kwargs.root from the package's config: the ledger goes "
                    "under the capture directory the job or the operator chose",
                )
            )
        block[LINEAGE_KWARGS] = {**kwargs, "root": lineage}
    data[BLOCK] = block
    return [], warnings


def writable_dir(data: dict, server_type: str) -> list[Path]:
    """The capture directory and the lineage ``root`` (when one is set) for a model server while
    capture is enabled, each created if missing; else ``[]``."""
    block = _block(data)
    if server_type != MODEL_SERVERS or not enabled(data) or not block.get("dir") or block.get("sink"):
        return []
    paths = [Path(block["dir"])]
    kwargs = block.get(LINEAGE_KWARGS)
    if isinstance(kwargs, dict) and isinstance(kwargs.get("root"), str) and kwargs["root"]:
        root = Path(kwargs["root"])
        if not any(root == p or p in root.parents for p in paths):
            paths.append(root)
    for path in paths:
        path.mkdir(parents=True, exist_ok=True)
    return paths


def passed(data: dict, server_type: str, environ: dict) -> dict[str, str]:
    """``{control token variable: value}`` for a model server while capture is enabled and the
    variable is set in the daemon's environment, else ``{}``."""
    block = _block(data)
    if server_type != MODEL_SERVERS or not enabled(data):
        return {}
    name = block.get("control_auth_token_env") or CONTROL_TOKEN_VAR
    return {name: environ[name]} if isinstance(name, str) and environ.get(name) else {}
