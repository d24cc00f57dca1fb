"""Group statistics: per-row mean/std/min/max/failures and the "no GRPO signal" flag (docs/architecture.md §9)."""

from __future__ import annotations

import io
import json
import math

from rich.console import Console

from gym_runtime.rollouts.report import print_report, report_dict, summary_lines
from gym_runtime.rollouts.stats import NO_SIGNAL, RolloutResult, row_stats, summarize
from gym_runtime.rollouts.verdict import BAD_REWARD, reward_problem


def res(row: int, sample: int, reward: float | None, code: str | None = None) -> RolloutResult:
    err = {"code": code, "message": "boom"} if code else None
    return RolloutResult(row, sample, row + 1, "agent", reward, 0.1, err)


RESULTS = [
    res(0, 0, 1.0),
    res(0, 1, 0.0),
    res(0, 2, 1.0),
    res(0, 3, 0.0),
    res(1, 0, 0.5),
    res(1, 1, 0.5),
    res(1, 2, 0.5),
    res(1, 3, None, "GR-ROLLOUT-HTTP"),
    res(2, 0, None, "GR-ROLLOUT-HTTP"),
    res(2, 1, None, "GR-ROLLOUT-TIMEOUT"),
    res(2, 2, 1.0),
    res(2, 3, None, "GR-ROLLOUT-HTTP"),
]


def test_row_stats() -> None:
    s0, s1, s2 = row_stats(reversed(RESULTS))
    assert (s0.mean, s0.std, s0.min, s0.max, s0.failures, s0.signal, s0.flag) == (0.5, 0.5, 0.0, 1.0, 0, True, None)
    assert (s1.mean, s1.std, s1.failures, s1.signal, s1.flag) == (0.5, 0.0, 1, False, NO_SIGNAL)
    assert (s2.samples, s2.rewards, s2.failures, s2.signal) == (4, [1.0], 3, None)


def test_all_failed_row_has_no_numbers() -> None:
    [s] = row_stats([res(0, 0, None, "X"), res(0, 1, None, "X")])
    assert (s.mean, s.std, s.min, s.max, s.signal) == (None, None, None, None, None)


def test_float_noise_is_equal() -> None:
    [s] = row_stats([res(0, 0, 0.1 + 0.2), res(0, 1, 0.3)])
    assert s.signal is False


def test_summary() -> None:
    stats = row_stats(RESULTS)
    s = summarize(stats, RESULTS, wall_s=2.0)
    assert (s.rows, s.rollouts, s.succeeded, s.failures) == (3, 12, 8, 4)
    assert (s.signal_rows, s.no_signal_rows, s.unknown_signal_rows, s.signal_share) == (1, 1, 1, 0.5)
    assert s.failures_by_code == {"GR-ROLLOUT-HTTP": 3, "GR-ROLLOUT-TIMEOUT": 1}
    assert s.rollouts_per_s == 6.0 and math.isclose(s.reward_mean, 4.5 / 8)


def test_table_and_json() -> None:
    stats = row_stats(RESULTS)
    summary = summarize(stats, RESULTS, 2.0)
    console = Console(file=io.StringIO(), force_terminal=False, record=True, width=140, color_system=None)
    print_report(console, stats, summary)
    text = console.export_text()
    assert NO_SIGNAL in text and "rows with GRPO signal: 1/2 (50%)" in text
    assert [ln for ln in text.splitlines() if ln != ln.rstrip()] == []  # no padding left at a line's end
    assert "GR-ROLLOUT-HTTP: 3" in text and "unknown" in text
    obj = json.loads(json.dumps(report_dict(stats, summary, package="p")))
    assert obj["package"] == "p" and obj["rows"][1]["flag"] == NO_SIGNAL and obj["summary"]["rollouts"] == 12


def test_reward_problem() -> None:
    assert reward_problem({"reward": 1}) is None and reward_problem({"reward": 0.25}) is None
    assert reward_problem({"reward": True}) == "reward is bool True, not a number"
    assert reward_problem({"reward": "1"}) == "reward is str '1', not a number"
    assert reward_problem({"reward": float("nan")}) == "reward is NaN, not a finite number"
    assert (
        reward_problem({"reward": None}) == "reward is null"
        and reward_problem({}) == "the answer has no 'reward' field"
    )


def test_counts_per_row_in_the_table_and_json() -> None:
    """The dry-run report shows unknown tool calls, context-overflow stops, bad rewards and
    out-of-range rewards per row (table and --json) and in the summary."""
    results = [
        RolloutResult(0, 0, 1, "agent", 1.0, 0.1, None, 2, 1, False, True),
        RolloutResult(0, 1, 1, "agent", 0.0, 0.1, None, 1, 0, True, False),
        RolloutResult(1, 0, 2, "other", None, 0.1, {"code": BAD_REWARD, "message": "reward is NaN"}),
        RolloutResult(1, 1, 2, "other", 0.5, 0.1),
    ]
    stats = row_stats(results)
    assert (
        stats[0].unknown_tool_calls,
        stats[0].invalid_tool_arguments,
        stats[0].context_overflows,
        stats[0].bad_rewards,
        stats[0].out_of_range,
    ) == (3, 1, 1, 0, 1)
    assert (stats[1].unknown_tool_calls, stats[1].bad_rewards, stats[1].failures) == (None, 1, 1)
    summary = summarize(stats, results, 1.0)
    assert (
        summary.unknown_tool_calls,
        summary.invalid_tool_arguments,
        summary.context_overflows,
        summary.bad_rewards,
        summary.out_of_range,
    ) == (3, 1, 1, 1, 1)
    console = Console(record=True, width=100, color_system=None)
    print_report(console, stats, summary)
    lines = console.export_text().splitlines()
    header = next(line for line in lines if "signal" in line).split()
    assert header[-9:] == ["fail", "unk", "ctx", "bad", "msk", "abt", "utc", "cap", "signal"]
    row0 = next(line for line in lines if line.split()[:3] == ["0", "1", "agent"]).split()
    assert row0[8:17] == ["0", "3", "1", "0", "0", "0", "-", "0", "yes"] and "1 out of range" in " ".join(row0)
    row1 = next(line for line in lines if line.split()[:3] == ["1", "2", "other"]).split()
    assert row1[8:12] == ["1", "-", "0", "1"]
    text = "\n".join(lines)
    assert "tool calls refused: 3" in text and "1 rollout(s) stopped because the prompt no longer fit" in text
    assert "1 reward(s) unusable" in text and "1 reward(s) outside the resources server's reward_range" in text
    obj = report_dict(stats, summary)
    assert {
        k: obj["rows"][0][k] for k in ("unknown_tool_calls", "context_overflows", "bad_rewards", "out_of_range")
    } == {"unknown_tool_calls": 3, "context_overflows": 1, "bad_rewards": 0, "out_of_range": 1}
    assert obj["rows"][1]["bad_rewards"] == 1 and obj["summary"]["bad_rewards"] == 1


def test_episode_counters_per_row_and_in_the_summary() -> None:
    results = [
        RolloutResult(0, 0, 1, "agent", 0.0, 0.1, unparsed_tool_calls=2, step_capped=True, aborted_calls=1),
        RolloutResult(0, 1, 1, "agent", 1.0, 0.1, unparsed_tool_calls=0, idle_capped=True, aborted_calls=0),
        RolloutResult(
            1, 0, 2, "agent", None, 0.1, {"code": "GR-ROLLOUT-POLICY-UNAVAILABLE", "message": "m"}, aborted_calls=3
        ),
    ]
    first, second = row_stats(results)
    assert (first.unparsed_tool_calls, first.step_capped, first.idle_capped, first.aborted) == (2, 1, 1, 1)
    assert (second.unparsed_tool_calls, second.aborted, second.failures) == (None, 3, 1)
    summary = summarize([first, second], results, 1.0)
    assert (summary.unparsed_tool_calls, summary.step_capped, summary.idle_capped, summary.aborted) == (2, 1, 1, 4)
    obj = report_dict([first, second], summary)
    assert {k: obj["rows"][0][k] for k in ("unparsed_tool_calls", "step_capped", "idle_capped", "aborted")} == {
        "unparsed_tool_calls": 2,
        "step_capped": 1,
        "idle_capped": 1,
        "aborted": 1,
    }


def test_repaired_text_is_counted_per_rollout_row_and_run() -> None:
    """Code points of model output that were no text (replaced by U+FFFD upstream) are counted;
    the rollouts stay scored."""
    results = [
        RolloutResult(0, 0, 1, "agent", 1.0, 0.1, repaired_text=3),
        RolloutResult(0, 1, 1, "agent", 1.0, 0.1, repaired_text=None),
        RolloutResult(1, 0, 2, "agent", 1.0, 0.1, repaired_text=2),
    ]
    first, second = row_stats(results)
    assert (first.repaired_text, second.repaired_text, first.failures, second.failures) == (3, 2, 0, 0)
    summary = summarize([first, second], results, 1.0)
    assert summary.repaired_text == 5 and summary.succeeded == 3
    obj = report_dict([first, second], summary)
    assert obj["rows"][0]["repaired_text"] == 3 and obj["summary"]["repaired_text"] == 5
    assert any("5 code point(s) of model output were no text" in line for line in summary_lines(summary))


def test_names_and_log_lines_with_brackets_are_printed_as_written_never_read_as_markup() -> None:
    """A package, agent or replica name and an error block's log lines are text: ``[/b]`` made rich
    raise MarkupError (the command failed with a traceback) and ``[gym-runtime ...]`` notes of a
    server's log vanished from the cause of an error block."""
    import io

    from gym_runtime.cli.dry_run import progress_line
    from gym_runtime.rollouts.report import replica_table

    results = [RolloutResult(0, i, 1, "agent[/b]", float(i % 2), 0.1, None) for i in range(4)]
    stats = row_stats(results)
    console = Console(record=True, width=200, color_system=None)
    print_report(console, stats, summarize(stats, results, 1.0), title="dry-run: pkg[/x] · 1 row(s)")
    console.print(
        replica_table(
            [
                {
                    "replica": "r[/i]",
                    "agent": "agent[/b]",
                    "node": "[n]",
                    "rollouts": 4,
                    "failed": 0,
                    "rollouts_per_s": 4.0,
                }
            ],
            2,
        )
    )
    text = console.export_text()
    assert "dry-run: pkg[/x]" in text and "agent[/b]" in text and "r[/i]" in text and "[n]" in text
    err = Console(file=io.StringIO(), width=200, color_system=None)
    progress_line(err)("cause: [gym-runtime 2026-12-06T06:04:09] start #1: python app.py\n[/bold] [INFO] up")
    said = err.file.getvalue()
    assert "[gym-runtime 2026-12-06T06:04:09] start #1: python app.py" in said and "[/bold] [INFO] up" in said


def test_a_table_written_to_a_file_keeps_each_row_on_one_line() -> None:
    # the padding is stripped line by line: a name holding \x1c (which str.splitlines splits on)
    # must not break its row in two
    results = [RolloutResult(0, s, 1, "ab\x1cx", r, 0.1, None) for s, r in enumerate((1.0, 0.0))]
    stats = row_stats(results)
    out = io.StringIO()
    print_report(Console(file=out, force_terminal=False, width=140), stats, summarize(stats, results, 1.0))
    (row,) = [ln for ln in out.getvalue().split("\n") if "ab\x1cx" in ln]
    assert [cell for cell in row.split(" ") if cell][:3] == ["0", "1", "ab\x1cx"] and row == row.rstrip()
