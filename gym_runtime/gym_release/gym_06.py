"""NeMo Gym 0.6: what the 0.6 release line changed against the base profile (:mod:`.base`).

From NeMo Gym 0.6.0 ``nemo_gym/global_config.py``: new reserved top-level keys (artifact roots,
pairing and verification switches, the ``token_id_capture`` and ``telemetry`` blocks), and the
composition rules the config stage applies for this line (docs/environment-packages.md,
"Composition"): a file overrides the files its ``config_paths`` pulls in (``load_extra_config_paths``
merges the include tree in post-order), renamed bundles and agents keep their old names as aliases
(``nemo_gym/_config_aliases.py``), an unbound agent is composed onto every other agent
(``compose_unbound_agent``, with the ``allowed_agents`` pairing check), and ``skip_verification``
reaches every agent (``validate_and_populate_defaults``); dataset rows may name the instance
declaring their dataset (``task_source``) instead of an agent (``nemo_gym/rollout_collection.py``
``resolve_task_sources``), and a collection's ``agent_name`` is ``agent_map._default``, which
re-routes every row, beside ``fan_out`` (``RolloutCollectionConfig``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar

from gym_runtime.gym_release.base import GymRelease

# reasoning-gym environments renamed in 0.6: old name -> new name (`nemo_gym/_config_aliases.py`)
_RENAMED_ENVIRONMENTS = {
    "reasoning_gym_claude_code": "claude_code_reasoning_gym",
    "reasoning_gym_hermes": "hermes_reasoning_gym",
    "reasoning_gym_orchestrator": "langgraph_orchestrator_reasoning_gym",
    "reasoning_gym_parallel_thinking": "langgraph_parallel_thinking_reasoning_gym",
    "reasoning_gym_reflection": "langgraph_reflection_reasoning_gym",
    "reasoning_gym_rewoo": "langgraph_rewoo_reasoning_gym",
}
_RENAMED_CONFIGS = {
    **{
        f"environments/{old}/config.yaml": f"environments/{new}/config.yaml"
        for old, new in _RENAMED_ENVIRONMENTS.items()
    },
    "responses_api_agents/stirrup_agent/configs/stirrup_gdpval.yaml": "responses_api_agents/stirrup_agent/configs/stirrup_agent.yaml",
    "responses_api_agents/tau2/configs/tau2_agent.yaml": "responses_api_agents/tau2/configs/tau2.yaml",
    "responses_api_agents/verifiers_agent/configs/acereason-math.yaml": "responses_api_agents/verifiers_agent/configs/verifiers_agent.yaml",
}


class Gym06(GymRelease):
    """The 0.6 line (0.6.x)."""

    line: ClassVar[str] = "0.6"
    first: ClassVar[str] = "0.6.0"
    reserved_keys: ClassVar[frozenset[str]] = GymRelease.reserved_keys | {
        "allow_openai_version_skew",
        "allow_unsupported_pairing",
        "cache_dir",
        "results_dir",
        "skip_verification",
        "skip_verification_reward",
        "token_id_capture",
        "telemetry",
    }
    includer_wins: ClassVar[bool] = True
    config_path_aliases: ClassVar[Mapping[str, str]] = MappingProxyType(_RENAMED_CONFIGS)
    agent_aliases: ClassVar[Mapping[str, str]] = MappingProxyType(
        {f"{old}_agent": f"{new}_agent" for old, new in _RENAMED_ENVIRONMENTS.items()}
    )
    composes_unbound_agent: ClassVar[bool] = True
    applies_skip_verification: ClassVar[bool] = True
    pairing_keys: ClassVar[tuple[str, ...]] = ("allowed_agents",)
    rows_name_task_source: ClassVar[bool] = True
    rows_rerouted_by_agent_map: ClassVar[bool] = True
