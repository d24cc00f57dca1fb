"""Case C40 (cases README, group G): the policy vLLM runs without ``--enable-auto-tool-choice``, so
every request that offers tools is answered 400 "``auto`` tool choice requires
--enable-auto-tool-choice and --tool-call-parser to be set", while tool-less rows and a tool-less
probe pass. Inputs built here: the bundled example (its code_lookup agent offers ``get_code``)
and a fake endpoint answering that 400 whenever ``tools`` is in the body.

Expected: the start-up probe (automatic when a row offers tools, and under ``--probe-policy``)
offers one tool and fails the start with ``GR-START-TOOL-PARSER`` naming the missing flags; under
``up`` without ``--probe-policy`` (which knows no rows), each tool row of ``/rollouts/run`` fails
with its own class ``GR-ROLLOUT-TOOL-PARSER`` (not a generic ``GR-ROLLOUT-HTTP`` 502) whose
message carries vLLM's words whole.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.daemon import kill_tree, up_process
from tests.helpers.environments import running_up, shared_venvs, stop_cleanly
from tests.helpers.fake_policy import TOOL_PARSER_TEXT, start_fake
from tests.helpers.load import run_batch
from tests.helpers.trust import ENV, MODEL, QUICKSTART, dry, example_rows

pytestmark = pytest.mark.pypi


def test_c40_a_row_offering_tools_makes_the_start_up_probe_name_the_missing_vllm_flags(tmp_path: Path) -> None:
    with start_fake(tmp_path, "no_tool_parser") as fake:
        run, results = dry(tmp_path, example_rows("code_lookup_agent"), fake_url=fake.url)
    assert run.code == 3 and results == [], run.stderr
    error = run.json()["error"]
    assert error["code"] == "GR-START-TOOL-PARSER"
    assert TOOL_PARSER_TEXT in error["message"]
    assert "--enable-auto-tool-choice --tool-call-parser" in error["hint"] and MODEL in error["hint"]
    assert "environment ready" not in run.stderr


def test_c40_probe_policy_finds_it_without_any_row(tmp_path: Path) -> None:
    """``up --probe-policy``: no ready line, exit 3, the named code."""
    with start_fake(tmp_path, "no_tool_parser") as fake:
        proc = up_process(
            QUICKSTART,
            tmp_path,
            "--policy-base-url",
            fake.url + "/v1",
            "--policy-model-name",
            MODEL,
            "--probe-policy",
            env=ENV,
        )
        try:
            out, err = proc.communicate(timeout=400)
        finally:
            kill_tree(proc)
    assert proc.returncode == 3 and out == "", err
    assert "GR-START-TOOL-PARSER" in err and "--enable-auto-tool-choice" in err


def test_c40_a_tool_row_fails_by_name_with_vllms_words_whole(tmp_path: Path) -> None:
    rows = example_rows("code_lookup_agent")[:1] + example_rows("arithmetic_agent")[:1]
    with (
        start_fake(tmp_path, "no_tool_parser") as fake,
        running_up(
            QUICKSTART,
            tmp_path,
            "--policy-base-url",
            fake.url + "/v1",
            "--policy-model-name",
            MODEL,
            env={**ENV, **shared_venvs()},
        ) as (proc, info),
    ):
        tool_row, plain_row = run_batch(info["head_server"], rows).results
        code, err = stop_cleanly(proc)
    assert tool_row["error"]["code"] == "GR-ROLLOUT-TOOL-PARSER"
    message = tool_row["error"]["message"]
    assert TOOL_PARSER_TEXT in message and "--enable-auto-tool-choice --tool-call-parser" in message
    assert message.startswith("code_lookup_agent: model server 'policy_model'")
    assert "error" not in plain_row and plain_row["reward"] == 0.0  # the fake answers "OK.": a scored 0
    assert code == 0, err
