"""Case C38 (cases README, group G): a reasoning-only turn (``content: null``, ``reasoning``,
``finish_reason: stop``) makes simple_agent call the model again and again; with ``max_steps``
unset nothing bounds the episode (measured: 2 rollouts, 2,210 model calls in 114 s). Inputs built
here: the bundled example with ``uses_reasoning_parser: true``, its code_lookup agent without
``max_steps``, and a fake endpoint answering every call with reasoning only.

Expected: a bounded episode by default (a step cap, and a cap on consecutive turns with neither
a message nor a tool call, each configurable and counted per row, the table's ``cap``); a warning
at config time for an agent with no ``max_steps``; a default deadline for dry-run rollouts, with
a flag to change it.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from gym_runtime.dryrun.run import DryRunRequest
from tests.helpers.fake_policy import start_fake
from tests.helpers.gym_servers import SERVERS
from tests.helpers.trust import dry, example_rows

AGENT_KEY = "code_lookup_agent.responses_api_agents.simple_agent"
PROBE = 2  # the start-up probe's plain turn and, since the row offers a tool, its tool turn
UNBOUNDED = ["policy_model.responses_api_models.vllm_model.uses_reasoning_parser=true", f"{AGENT_KEY}.max_steps=null"]


def calls(url: str) -> int:
    return len(httpx.get(url + "/fake/requests", timeout=10, trust_env=False).json())


@pytest.mark.pypi
def test_c38_reasoning_only_turns_end_the_episode_after_max_idle_turns(tmp_path: Path) -> None:
    with start_fake(tmp_path, "reasoning_only") as fake:
        run, results = dry(tmp_path, example_rows("code_lookup_agent")[:1], *UNBOUNDED, fake_url=fake.url, samples=2)
        model_calls = calls(fake.url)
    assert run.code == 0, run.stderr
    assert model_calls == 2 * 2 + PROBE  # max_idle_turns (2) per rollout
    assert [(r["idle_capped"], r["step_capped"], r["reward"]) for r in results] == [(True, False, 0.0)] * 2
    row = run.json()["rows"][0]
    assert (row["idle_capped"], row["step_capped"]) == (2, 0) and run.json()["summary"]["idle_capped"] == 2
    assert "GR-CONFIG-NO-MAX-STEPS" in run.stderr and "agent 'code_lookup_agent' sets no max_steps" in run.stderr


@pytest.mark.pypi
def test_c38_the_default_step_cap_bounds_an_episode_the_idle_cap_does_not(tmp_path: Path) -> None:
    with start_fake(tmp_path, "reasoning_only") as fake:
        run, results = dry(
            tmp_path,
            example_rows("code_lookup_agent")[:1],
            *UNBOUNDED,
            f"{AGENT_KEY}.max_idle_turns=1000",
            fake_url=fake.url,
        )
        model_calls = calls(fake.url)
    assert run.code == 0, run.stderr
    assert model_calls == 32 + PROBE  # the built-in agent's default max_steps
    assert (results[0]["step_capped"], results[0]["idle_capped"]) == (True, False)
    assert run.json()["rows"][0]["step_capped"] == 1


@pytest.mark.pypi
def test_c38_a_dry_run_rollout_has_a_deadline(tmp_path: Path) -> None:
    """No cap at all (both set very high): the rollout ends at ``--rollout-timeout``, by name."""
    with start_fake(tmp_path, "reasoning_only") as fake:
        run, results = dry(
            tmp_path,
            example_rows("code_lookup_agent")[:1],
            *UNBOUNDED,
            f"{AGENT_KEY}.max_idle_turns=100000",
            f"{AGENT_KEY}.max_steps=100000",
            "--rollout-timeout",
            "3",
            fake_url=fake.url,
        )
    assert run.code == 3, run.stderr
    assert results[0]["error"]["code"] == "GR-ROLLOUT-DEADLINE"
    assert "did not answer within the rollout deadline of 3s" in results[0]["error"]["message"]


def test_c38_the_defaults_bound_every_episode_and_every_dry_run_rollout() -> None:
    """The warning's figure is the built-in agent's own default; a dry-run rollout has a deadline
    unless asked not to (``--rollout-timeout 0``)."""
    from gym_runtime.config.episodes import BUILTIN_MAX_STEPS
    from gym_runtime.rollouts import ROLLOUT_TIMEOUT_S

    app = (SERVERS / "responses_api_agents" / "simple_agent" / "app.py").read_text()
    assert re.search(r"^DEFAULT_MAX_STEPS = (\d+)$", app, re.M).group(1) == str(BUILTIN_MAX_STEPS)
    assert DryRunRequest("p", "d").rollout_timeout_s == ROLLOUT_TIMEOUT_S == 900.0
