"""Fuzz, reduced for CI (``bench/fuzz.py`` runs >= 10,000 inputs per target and prints the counts):
dataset rows, head server request bodies, raw bytes to the egress proxy and model output that is no
text at every hop it crosses (probe, model server, agent, relay, head; manifests and
configs: ``tests/cli/test_cli_fuzz.py``). Every input gets a result or one of our errors: no
traceback, no exception that is not ours, no HTTP 500, no body that is not strict JSON, no hang
(:mod:`tests.helpers.fuzz_targets`). The explicit cases below are what the fuzzing found; each was
a bug."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.fuzz_targets import TARGETS, run_target

EXAMPLES = {
    "rows": 400,
    "head": 300,
    "proxy": 300,
    "text_probe": 40,
    "text_model": 40,
    "text_agent": 40,
    "text_relay": 40,
    "text_head": 40,
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_fuzz_target(name: str) -> None:
    counts = run_target(TARGETS[name], EXAMPLES[name])
    assert sum(counts.values()) >= EXAMPLES[name] * 0.9, counts


@pytest.mark.parametrize(
    ("data", "label"),
    [
        (b"[" * 100_000, "GR-DATASET-JSON"),  # RecursionError out of the parser
        (b'{"task_idx": 1' + b"0" * 5000 + b"}", "GR-DATASET-JSON"),  # ValueError: more than 4300 digits
    ],
)
def test_rows_found_by_fuzzing(tmp_path: Path, data: bytes, label: str) -> None:
    with TARGETS["rows"].context(tmp_path) as check:
        assert check(data) == label


@pytest.mark.parametrize(
    ("case", "label"),
    [
        # a body that is not UTF-8: FastAPI's own {"detail"} 400 instead of our envelope
        (("POST /rollouts/run", b"\x80"), "HTTP 400 GR-ROLLOUT-BAD-REQUEST"),
        # NaN in a row: no agent can be sent it (the row used to end as a misleading GR-ROLLOUT-DEADLINE)
        (
            ("POST /rollouts/run", '{"examples": [{"agent_ref": {"name": "echo"}, "x": NaN}]}'),
            "HTTP 400 GR-ROLLOUT-BAD-REQUEST",
        ),
        # a lone surrogate in a row: not text, cannot be sent (was GR-INTERNAL: UnicodeEncodeError in dispatch)
        (
            ("POST /rollouts/run", '{"examples": [{"agent_ref": {"name": "echo"}, "x": "\\ud800"}]}'),
            "HTTP 400 GR-ROLLOUT-BAD-REQUEST",
        ),
        # an agent answering JSON nested past the parser's depth (was GR-ROLLOUT-DEADLINE, the row lost)
        (
            (
                "POST /rollouts/run",
                '{"examples": [{"agent_ref": {"name": "echo"}, "fuzz_body": "' + "[" * 5000 + '"}]}',
            ),
            "HTTP 200 GR-ROLLOUT-BAD-JSON",
        ),
        # an agent answering NaN beside a good reward: the head's answer stays strict JSON (null there)
        (
            (
                "POST /rollouts/run",
                '{"examples": [{"agent_ref": {"name": "echo"}, "fuzz_body": "{\\"reward\\": 1, \\"m\\": NaN}"}]}',
            ),
            "HTTP 200 result",
        ),
    ],
)
def test_head_bodies_found_by_fuzzing(tmp_path: Path, case: tuple, label: str) -> None:
    with TARGETS["head"].context(tmp_path) as check:
        assert check(case) == label


@pytest.mark.parametrize(
    "request_head",
    [
        b"CONNECT x.invalid:8o HTTP/1.1\r\n\r\n",
        b"CONNECT [::1 HTTP/1.1\r\n\r\n",
        b"GET http://x.invalid:99999/ HTTP/1.1\r\n\r\n",
        b"CONNECT 127.0.0.1:-1 HTTP/1.1\r\n\r\n",
    ],
)
def test_proxy_requests_found_by_fuzzing(tmp_path: Path, request_head: bytes) -> None:
    """A port that is not a number in 0-65535, or a broken [IPv6] host: the proxy's handler raised
    ValueError (an unhandled exception, the client left waiting); now a 400 naming the target."""
    with TARGETS["proxy"].context(tmp_path) as check:
        assert check(request_head) == "HTTP 400"


@pytest.mark.parametrize("hop", ["text_probe", "text_model", "text_agent", "text_relay", "text_head"])
def test_model_output_that_is_no_text_found_by_fuzzing(tmp_path: Path, hop: str) -> None:
    """A lone surrogate from a split escape in the reasoning, a NUL in the tool name, an escaped
    surrogate inside the arguments' own JSON: the probe crashed (UnicodeEncodeError, exit 1), the
    model server answered 500 where the answer was right; now each hop passes, counting 2 (the
    reasoning and the name; the arguments' escape is the agent's to count)."""
    case = {
        "content": "fine \x07",
        "reasoning": "think \ud83d",
        "name": "get_code\x00",
        "arguments": '{"key": "alpha\\ud83d"}',
    }
    with TARGETS[hop].context(tmp_path) as check:
        label = check(case)
    assert label == "probe ok" if hop == "text_probe" else label.endswith(" repaired"), label
