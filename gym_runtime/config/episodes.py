"""Warnings about episodes that a config leaves without a bound (case C38).

A ``simple_agent`` ends its loop on an assistant message, on ``incomplete_details`` or at
``max_steps``; a turn that holds only reasoning matches none of these, so an agent without
``max_steps`` can call the model thousands of times for one rollout. The built-in ``simple_agent``
(``servers/responses_api_agents/simple_agent``) caps such episodes anyway, at
:data:`BUILTIN_MAX_STEPS` model calls or after ``max_idle_turns`` turns with neither a message nor
a tool call (docs/rollouts.md); NeMo Gym's own ``simple_agent`` has no default cap at all. Either
way a config that sets no ``max_steps`` gets the warning ``GR-CONFIG-NO-MAX-STEPS`` naming the
instance, its file and key: it never stops a start.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gym_runtime.errors import Violation

# The built-in simple_agent's DEFAULT_MAX_STEPS (its app.py; tests/config hold the two equal).
BUILTIN_MAX_STEPS = 32
AGENT = ("responses_api_agents", "simple_agent")


def unbounded_agents(instances: Mapping[str, Any]) -> list[Violation]:
    """A ``GR-CONFIG-NO-MAX-STEPS`` warning for each ``simple_agent`` instance (``ServerInstance``)
    whose ``max_steps`` is unset or null."""
    out = []
    for inst in instances.values():
        if (inst.server_type, inst.implementation) != AGENT or inst.config.get("max_steps") is not None:
            continue
        if inst.server_dir.origin == "builtin":
            what = (
                f"its episodes stop at the built-in default of {BUILTIN_MAX_STEPS} model calls, or after "
                "max_idle_turns (2) turns with neither a message nor a tool call"
            )
        else:
            what = "the package's own simple_agent may call the model without end (NeMo Gym's has no default cap)"
        out.append(
            Violation(
                "GR-CONFIG-NO-MAX-STEPS",
                f"agent '{inst.name}' sets no max_steps: {what}",
                file=inst.source,
                key=f"{inst.name}.responses_api_agents.simple_agent.max_steps",
                hint="set max_steps to the most model calls a task of this environment needs "
                '(1 for a single-turn task); see docs/rollouts.md, "Bounded episodes"',
            )
        )
    return out
