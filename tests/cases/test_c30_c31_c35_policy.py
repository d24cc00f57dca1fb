"""Cases C30, C31, C35 (tests/cases/data/C30|C31|C35/README.md) as their run scripts do them: the
case's package and rows, ``gym-runtime dry-run`` (or ``up``) against an outside policy endpoint.
The endpoint is the built-in stub model with the misbehaviour of the case's ``FAKE_MODE``
(``--mode``; the stub is the one allowed stand-in for vLLM). Venvs resolve from PyPI, hence ``pypi``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples.conftest import ROOT, dry_run
from tests.helpers.cases import CASES
from tests.helpers.daemon import kill_tree, up_process
from tests.helpers.gym_servers import SERVERS, start_stub

MODEL = "acme-policy"
ENV = {"GYM_RUNTIME_POLICY_API_KEY": "dummy"}


def case_run(case: str, tmp_path: Path, base_url: str, *args: str):
    out = tmp_path / "out.jsonl"
    run = dry_run(
        CASES / case / "pkg",
        CASES / case / "rows.jsonl",
        "--samples",
        "1",
        "--json",
        "--out",
        str(out),
        "--policy-base-url",
        base_url,
        "--policy-model-name",
        MODEL,
        *args,
        env=ENV,
        timeout=400,
    )
    results = [json.loads(line) for line in out.read_text().splitlines()] if out.is_file() else []
    return run, results


def test_c30_the_cases_four_wordings_are_context_overflows() -> None:
    """tests/cases/data/C30/README.md: the case's check_classifier.py says True for all four."""
    done = subprocess.run(
        [sys.executable, str(CASES / "C30" / "check_classifier.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    verdicts = re.findall(r"treated as context length: (\w+)", done.stdout)
    assert verdicts == ["True"] * 4


def test_c30_a_closing_think_tag_alone_keeps_the_reasoning_from_the_grader() -> None:
    """tests/cases/data/C30/README.md (``FAKE_MODE=nothinkopen`` of the case's fake_vllm.py): the
    reasoning holds the right value, the answer does not; with the parser on the grader reads only
    the answer."""
    fake = (CASES / "C30" / "fake_vllm.py").read_text()
    content = re.search(r'MODE == "nothinkopen": m = msg\("([^"]*)"\)', fake).group(1)
    sys.path.insert(0, str(SERVERS))
    from _kit.reasoning import split_think

    reasoning, answer = split_think(content)
    assert reasoning == ["6 * 7 = 42, so the value is 42."] and answer == "I am not sure."


@pytest.mark.pypi
def test_c30_a_prompt_too_long_400_ends_the_rollout_and_is_counted(tmp_path: Path) -> None:
    """tests/cases/data/C30/README.md, ``run_dry.sh ctxlen``: the rollout is scored (not failed), ends
    incomplete, and the report counts it as a context-overflow stop."""
    with start_stub(tmp_path, "--model", MODEL, "--mode", "overflow=vllm-decoder-prompt") as stub:
        run, results = case_run("C30", tmp_path, stub.url + "/v1")
    assert run.code == 0, run.stderr
    report = run.json()
    assert report["summary"]["failures"] == 0 and report["summary"]["context_overflows"] == 1
    assert report["rows"][0]["context_overflows"] == 1 and report["rows"][0]["mean"] == 0.0
    assert results[0]["context_overflow"] is True and results[0]["reward"] == 0.0 and results[0]["error"] is None


@pytest.mark.pypi
def test_c31_a_call_to_verify_is_refused_and_counted(tmp_path: Path) -> None:
    """tests/cases/data/C31/README.md, ``run_dry.sh verifytool``: the policy calls ``verify`` (no tool
    offered); the call reaches nothing, the answer is not leaked, reward 0.0, one unknown tool call
    in the table and in --json."""
    with start_stub(tmp_path, "--model", MODEL, "--mode", "call=verify") as stub:
        run, results = case_run("C31", tmp_path, stub.url + "/v1")
        table = dry_run(
            CASES / "C31" / "pkg",
            CASES / "C31" / "rows.jsonl",
            "--samples",
            "1",
            "--policy-base-url",
            stub.url + "/v1",
            "--policy-model-name",
            MODEL,
            env=ENV,
            timeout=400,
        )
    assert run.code == 0, run.stderr
    row = run.json()["rows"][0]
    assert (row["mean"], row["unknown_tool_calls"], row["failures"]) == (0.0, 1, 0)
    assert run.json()["summary"]["unknown_tool_calls"] == 1 and results[0]["unknown_tool_calls"] == 1
    assert table.code == 0, table.stderr
    line = next(x for x in table.stdout.splitlines() if "acme_calc_agent" in x).split()
    header = next(x for x in table.stdout.splitlines() if " unk " in x).split()
    assert line[header.index("unk")] == "1" and "tool calls refused: 1" in table.stdout


@pytest.mark.pypi
@pytest.mark.parametrize("suffix", ["", "/v1/chat/completions"])
def test_c35_a_base_url_that_is_not_the_v1_root_fails_before_ready(tmp_path: Path, suffix: str) -> None:
    """tests/cases/data/C35/README.md, ``run.sh PORT SUFFIX``: nothing is reported ready, exit 3, the
    error names the /v1 root to use; no rollout runs and nothing is left running."""
    with start_stub(tmp_path, "--model", "stub-model") as stub:
        run = dry_run(
            CASES / "C35" / "pkg",
            CASES / "C35" / "rows.jsonl",
            "--samples",
            "1",
            "--json",
            "--policy-base-url",
            stub.url + suffix,
            "--policy-model-name",
            "stub-model",
            env=ENV,
            timeout=400,
        )
    assert run.code == 3
    error = run.json()["error"]
    assert error["code"] == "GR-START-MODEL-URL"
    assert f"did you mean {stub.url}/v1?" in error["message"] and "environment ready" not in run.stderr
    assert "stop took " in run.stderr and "unclean stop" not in run.stderr


@pytest.mark.pypi
def test_c35_up_prints_no_ready_line(tmp_path: Path) -> None:
    """tests/cases/data/C35/README.md: ``gym-runtime up .../C35/pkg --policy-base-url http://host:port``
    never prints the ready line a training job would start on."""
    with start_stub(tmp_path, "--model", "stub-model") as stub:
        proc = up_process(
            CASES / "C35" / "pkg", tmp_path, "--policy-base-url", stub.url, "--policy-model-name", "stub-model", env=ENV
        )
        try:
            out, err = proc.communicate(timeout=400)
        finally:
            kill_tree(proc)
    assert proc.returncode == 3 and out == ""
    assert f"did you mean {stub.url}/v1?" in err
