"""Case C41 (cases README, group G): the endpoint's tool-call parser fails, so the call arrives as
plain text in ``content`` (``finish_reason: stop``, no ``tool_calls``). Inputs built here: the
bundled example's code_lookup row and a fake endpoint answering ``<tool_call>{"name": "get_code",
"arguments": {"key": "a"}}</tool_call>`` as the content.

Expected: the markup is found in the final message and counted per rollout as
``unparsed_tool_calls`` (the dry-run table's ``utc``, ``--json``, ``--out``), with one warning
naming the parser; the answer is never scored silently.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.examples.conftest import dry_run
from tests.helpers.fake_policy import start_fake
from tests.helpers.trust import ENV, MODEL, QUICKSTART, dry, example_rows, write_rows

pytestmark = pytest.mark.pypi
WARNING = "the policy emitted tool calls that the endpoint's parser did not parse; check --tool-call-parser"


def test_c41_tool_call_markup_in_the_final_answer_is_counted_and_warned_about(tmp_path: Path) -> None:
    rows = example_rows("code_lookup_agent")[:1]
    with start_fake(tmp_path, "tool_call_text") as fake:
        run, results = dry(tmp_path, rows, fake_url=fake.url, samples=2)
        table = dry_run(
            QUICKSTART,
            write_rows(tmp_path, rows, "table.jsonl"),
            "--samples",
            "2",
            "--policy-base-url",
            fake.url + "/v1",
            "--policy-model-name",
            MODEL,
            env=ENV,
            timeout=400,
        )
    assert run.code == 0, run.stderr
    report = run.json()
    assert report["rows"][0]["unparsed_tool_calls"] == 2 and report["summary"]["unparsed_tool_calls"] == 2
    assert [r["unparsed_tool_calls"] for r in results] == [1, 1] and [r["reward"] for r in results] == [0.0, 0.0]
    assert table.code == 0, table.stderr
    lines = table.stdout.splitlines()
    header = next(x for x in lines if " utc " in x).split()
    line = next(x for x in lines if "code_lookup_agent" in x).split()
    assert line[header.index("utc")] == "2"
    text = " ".join(table.stdout.split())  # rich wraps long lines at the console width
    assert text.count(WARNING) == 1 and "utc: tool calls left as text in a final answer" in text
