"""``gym-runtime up`` and ``dry-run`` against a real vLLM engine served without the tool flags and
without a reasoning parser (vLLM's defaults; docs/rollouts.md, "A real vLLM engine"):

- ``--probe-policy`` fails the start with ``GR-START-TOOL-PARSER``, naming the flags, with vLLM's
  own words (case C40 against the real engine), and so does a dry-run whose rows offer tools;
- under ``up`` without the probe, a tool row fails by name (``GR-ROLLOUT-TOOL-PARSER``) while a row
  without tools is served, and the model's ``<think>`` tags in the content (no reasoning parser)
  become a ``reasoning`` item with ``uses_reasoning_parser: true``.
"""

from __future__ import annotations

import pytest

from tests.examples.conftest import dry_run
from tests.helpers.environments import running_up, stop_cleanly
from tests.helpers.load import run_batch
from tests.vllm.helpers import POLICY, QUICKSTART, policy_args, probe_refused, row, rows_file, runtime_env

pytestmark = [pytest.mark.vllm, pytest.mark.pypi, pytest.mark.slow, pytest.mark.timeout(1800)]

VLLM_WORDS = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'


def test_probe_policy_names_the_missing_tool_flags(engine, tmp_path):
    err = probe_refused(engine("plain"), tmp_path)
    assert "GR-START-TOOL-PARSER" in err and VLLM_WORDS in err and "--enable-auto-tool-choice" in err


def test_a_dry_run_of_tool_rows_is_stopped_by_the_start_up_probe(engine, tmp_path):
    served = engine("plain")
    rows = [row("code_lookup_agent", "What is the code for alpha please?", tools=True)]
    run = dry_run(
        QUICKSTART,
        rows_file(tmp_path, rows),
        "--samples",
        "1",
        "--json",
        *policy_args(served),
        env=runtime_env(tmp_path),
        timeout=900,
    )
    assert run.code == 3, run.stderr[-3000:]
    error = run.json()["error"]
    assert error["code"] == "GR-START-TOOL-PARSER" and VLLM_WORDS in error["message"]


def test_without_the_probe_a_tool_row_fails_by_name_and_think_tags_become_reasoning(engine, tmp_path):
    served = engine("plain")
    rows = [
        row("code_lookup_agent", "What is the code for alpha please?", tools=True),
        row("arithmetic_agent", "What is 17 * 23?"),
    ]
    with running_up(
        QUICKSTART, tmp_path, *policy_args(served), f"{POLICY}.uses_reasoning_parser=true", env=runtime_env(tmp_path)
    ) as (proc, info):
        tool_row, plain_row = run_batch(info["head_server"], rows).results
        code, err = stop_cleanly(proc)
    assert code == 0, err[-3000:]
    assert tool_row["error"]["code"] == "GR-ROLLOUT-TOOL-PARSER" and VLLM_WORDS in tool_row["error"]["message"]
    assert "error" not in plain_row, plain_row
    reasoning = [o for o in plain_row["response"]["output"] if o["type"] == "reasoning"]
    assert reasoning and reasoning[0]["summary"][0]["text"].strip() == "The user wants a short reply."
    message = [o for o in plain_row["response"]["output"] if o["type"] == "message"][-1]
    assert message["content"][0]["text"] == "OK"
