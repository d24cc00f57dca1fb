"""NeMo Gym 0.6: what the 0.6 release line changed against the base profile (:mod:`.base`).

From NeMo Gym 0.6.0 ``nemo_gym/global_config.py``: new reserved top-level keys (artifact roots,
pairing and verification switches, the ``token_id_capture`` and ``telemetry`` blocks), and the
composition rules the config stage applies for this line (docs/environment-packages.md,
"Composition"); dataset rows may name the instance declaring their dataset (``task_source``)
instead of an agent (``nemo_gym/rollout_collection.py`` ``resolve_task_sources``).
"""

from __future__ import annotations

from typing import ClassVar

from gym_runtime.gym_release.base import GymRelease


class Gym06(GymRelease):
    """The 0.6 line (0.6.x)."""

    line: ClassVar[str] = "0.6"
    first: ClassVar[str] = "0.6.0"
    reserved_keys: ClassVar[frozenset[str]] = GymRelease.reserved_keys | {
        "allow_openai_version_skew", "allow_unsupported_pairing", "cache_dir", "results_dir", "skip_verification",
        "skip_verification_reward", "token_id_capture", "telemetry",
    }
    rows_name_task_source: ClassVar[bool] = True
