"""What one agent answer says about a rollout: its reward (if usable) and what went wrong on the way.

An agent's ``/run`` answer is environment output, so it is untrusted (docs/rollouts.md):

- ``reward`` must be a finite number; NaN, Infinity, null, a string, a boolean or no ``reward``
  at all is a row error ``GR-ROLLOUT-BAD-REWARD`` naming the agent, its resources server and the
  value (:func:`reward_problem`), never ``reward=None`` silently. The built-in agents already
  answer such a verify answer with 502 ``error.type: bad_reward`` (``servers/_kit/rewards.py``);
  this check covers every other agent.
- a reward outside the range the resources server declares (``reward_range: [low, high]`` in its
  instance config, :func:`agent_facts`) is kept but flagged ``out_of_range``.
- counters the built-in agents add (:data:`COUNTERS`: ``unknown_tool_calls``,
  ``invalid_tool_arguments``, ``context_overflow_stops``, ``unparsed_tool_calls``,
  ``max_steps_stops``, ``idle_turn_stops``, ``aborted_calls``, ``repaired_text``) are read, also beside a row error;
  an agent that does not report one gives ``None``. A context-overflow stop is also seen on the
  response itself (``response.context_overflow``, set by the built-in ``vllm_model``), whichever
  agent ran the loop.
- what a Gym 0.5+ verify answer says about its own validity is kept (NeMo Gym 0.7.0
  ``nemo_gym/base_resources_server.py`` ``BaseVerifyResponse``): ``mask_sample`` (true: the reward
  is no valid measurement, e.g. the judge was down; the reward is kept but left out of the row's
  spread, :mod:`gym_runtime.rollouts.stats`), ``failure_kind`` and ``failure_reason`` (also beside
  an episode's handled failure, :mod:`gym_runtime.rollouts.tasks`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gym_runtime.errors import ConfigError, Violation

BAD_REWARD = "GR-ROLLOUT-BAD-REWARD"
COUNTERS = (
    "unknown_tool_calls",
    "invalid_tool_arguments",
    "context_overflow_stops",
    "unparsed_tool_calls",
    "max_steps_stops",
    "idle_turn_stops",
    "aborted_calls",
    "repaired_text",
)
AGENT_TYPE = "responses_api_agents"


@dataclass(frozen=True)
class AgentFacts:
    """What the report knows about an agent instance: the resources server it verifies with and
    that server's declared reward range ``(low, high)`` (None: not declared)."""

    resources_server: str | None = None
    reward_range: tuple[float, float] | None = None

    def describe(self, agent: str) -> str:
        return f"agent {agent!r}" + (f" (resources server {self.resources_server!r})" if self.resources_server else "")


def shown(value: Any, limit: int = 80) -> str:
    """A reward value for a message: NaN/Infinity spelled as JSON does, long text cut."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def reward_problem(answer: Any) -> str | None:
    """What is wrong with the ``reward`` of an answer, or None when it is a finite number."""
    if not isinstance(answer, dict):
        return f"the answer is not a JSON object (got {type(answer).__name__})"
    if "reward" not in answer:
        return "the answer has no 'reward' field"
    value = answer["reward"]
    if value is None:
        return "reward is null"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"reward is {type(value).__name__} {shown(value)}, not a number"
    if not math.isfinite(value):
        return f"reward is {shown(value)}, not a finite number"
    return None


def bad_reward(answer: Any, agent: str, facts: AgentFacts | None = None) -> dict[str, str] | None:
    """``{"code": GR-ROLLOUT-BAD-REWARD, "message"}`` when an answer's reward is unusable, else None."""
    problem = reward_problem(answer)
    if problem is None:
        return None
    return {
        "code": BAD_REWARD,
        "message": f"{(facts or AgentFacts()).describe(agent)} answered an unusable reward: {problem}",
    }


def _count(answer: dict[str, Any], key: str) -> int | None:
    value = answer.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass(frozen=True)
class Verdict:
    """One answer judged: ``reward`` (None when unusable), ``error`` (``{"code", "message"}``),
    the agent's counters (None when not reported; ``counts``: every one of :data:`COUNTERS` it
    reported, by name), ``context_overflow`` and ``out_of_range``."""

    reward: float | None
    error: dict[str, str] | None
    unknown_tool_calls: int | None = None
    invalid_tool_arguments: int | None = None
    context_overflow: bool = False
    out_of_range: bool = False
    mask_sample: bool = False
    failure_kind: str | None = None
    failure_reason: str | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, name: str) -> int | None:
        """The agent's count ``name`` (None when it did not report it)."""
        return self.counts.get(name)


def _validity(answer: dict[str, Any]) -> dict[str, Any]:
    """``mask_sample``, ``failure_kind``, ``failure_reason`` of an answer (untrusted: a mask is only
    ``true``; the strings are bounded)."""
    kind, reason = answer.get("failure_kind"), answer.get("failure_reason")
    return {
        "mask_sample": answer.get("mask_sample") is True,
        "failure_kind": kind[:200] if isinstance(kind, str) else None,
        "failure_reason": reason[:2000] if isinstance(reason, str) else None,
    }


def judge(answer: dict[str, Any], agent: str, facts: AgentFacts | None = None) -> Verdict:
    """Judge an agent answer (or a dispatch row error, which is kept as the error)."""
    facts = facts or AgentFacts()
    error = answer.get("error") if isinstance(answer.get("error"), dict) and "code" in answer["error"] else None
    counts: dict[str, Any] = {k: _count(answer, k) for k in ("unknown_tool_calls", "invalid_tool_arguments")}
    response = r if isinstance(r := answer.get("response"), dict) else {}
    overflow = bool(_count(answer, "context_overflow_stops") or response.get("context_overflow"))
    validity: dict[str, Any] = {
        **_validity(answer),
        "counts": {k: c for k in COUNTERS if (c := _count(answer, k)) is not None},
    }
    if error is not None:
        return Verdict(
            None,
            {"code": str(error["code"]), "message": str(error.get("message", ""))},
            **counts,
            context_overflow=overflow,
            **validity,
        )
    unusable = bad_reward(answer, agent, facts)
    if unusable is not None:
        return Verdict(None, unusable, **counts, context_overflow=overflow, **validity)
    reward = float(answer["reward"])
    low_high = facts.reward_range
    out = low_high is not None and not low_high[0] <= reward <= low_high[1]
    return Verdict(reward, None, **counts, context_overflow=overflow, out_of_range=out, **validity)


def reward_range(instance: Any) -> tuple[float, float] | None:
    """The ``reward_range: [low, high]`` a resources server instance declares, or None.

    Raises :class:`ConfigError` (``GR-CONFIG-REWARD-RANGE``) naming the instance, key and file
    when it is not two finite numbers with low <= high."""
    value = instance.config.get("reward_range")
    if value is None:
        return None
    ok = (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
        and value[0] <= value[1]
    )
    if not ok:
        key = f"{instance.name}.{instance.server_type}.{instance.implementation}.reward_range"
        raise ConfigError(
            f"{key} must be [low, high], two numbers with low <= high; got {value!r}",
            code="GR-CONFIG-REWARD-RANGE",
            violations=[
                Violation(
                    "GR-CONFIG-REWARD-RANGE",
                    f"got {value!r}",
                    file=instance.source,
                    key=key,
                    hint="e.g. reward_range: [0, 1]",
                )
            ],
            hint="declare the rewards the resources server gives, e.g. reward_range: [0, 1]",
        )
    return float(value[0]), float(value[1])


def agent_facts(instances: Mapping[str, Any], ranges: bool = True) -> dict[str, AgentFacts]:
    """:class:`AgentFacts` of every agent instance of a merged config (``name -> ServerInstance``),
    with the declared reward ranges unless ``ranges`` is False. Raises :class:`ConfigError` for a
    malformed ``reward_range``."""
    out: dict[str, AgentFacts] = {}
    for name, inst in instances.items():
        if inst.server_type != AGENT_TYPE:
            continue
        ref = inst.config.get("resources_server")
        server = ref.get("name") if isinstance(ref, dict) and isinstance(ref.get("name"), str) else None
        target = instances.get(server) if server else None
        out[name] = AgentFacts(server, reward_range(target) if ranges and target is not None else None)
    return out
