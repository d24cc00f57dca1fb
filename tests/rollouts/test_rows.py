"""Dataset rows are checked before anything starts, each problem naming its line and field (docs/architecture.md §9)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gym_runtime.errors import DatasetError
from gym_runtime.rollouts.rows import load_rows, parse_rows


@dataclass
class Agent:
    implementation: str
    config: dict = field(default_factory=dict)


AGENTS = {"weather_agent": Agent("simple_agent"), "vf_agent": Agent("verifiers_agent", {"vf_env_id": "tiny-math"})}


def row(**kw) -> dict:
    base = {
        "responses_create_params": {"input": [{"role": "user", "content": "hi"}]},
        "agent_ref": {"type": "responses_api_agents", "name": "weather_agent"},
    }
    base.update(kw)
    return base


def jsonl(*rows) -> str:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n"


def problems(text: str, agents=AGENTS, manifest_vf=None) -> list:
    with pytest.raises(DatasetError) as e:
        parse_rows(text, "rows.jsonl", agents, manifest_vf)
    assert e.value.exit_code == 1
    return e.value.violations


def test_good_rows_keep_order_lines_and_extra_keys() -> None:
    text = jsonl(
        row(), "", row(question="q", answer="a", task="t", example_id="e1", info={"k": 1}, task_idx=3, custom={"x": 1})
    )
    rows = parse_rows(text, "rows.jsonl", AGENTS)
    assert [(r.index, r.line, r.agent) for r in rows] == [(0, 1, "weather_agent"), (1, 3, "weather_agent")]
    assert rows[1].data["custom"] == {"x": 1}


def test_string_input_is_accepted() -> None:
    rows = parse_rows(jsonl(row(responses_create_params={"input": "What is 2+2?"})), "r", AGENTS)
    assert len(rows) == 1


def test_every_problem_is_reported_with_line_and_field() -> None:
    bad_ref = row(agent_ref={"type": "responses_api_agents", "name": "weather_agnet"})
    text = jsonl(
        row(),
        {"agent_ref": row()["agent_ref"]},
        "{not json",
        bad_ref,
        [1, 2],
        row(responses_create_params={"input": []}),
        row(task_idx="3"),
    )
    found = problems(text)
    by_line = {(v.file, v.key): v for v in found}
    assert ("rows.jsonl:2", "responses_create_params") in by_line
    assert by_line[("rows.jsonl:3", None)].code == "GR-DATASET-JSON"
    ref = by_line[("rows.jsonl:4", "agent_ref.name")]
    assert ref.code == "GR-DATASET-AGENT-REF" and "'weather_agent'" in ref.hint
    assert by_line[("rows.jsonl:5", None)].code == "GR-DATASET-ROW"
    assert ("rows.jsonl:6", "responses_create_params.input") in by_line
    assert by_line[("rows.jsonl:7", "task_idx")].message == "must be an integer, got str"
    assert len(found) == 6


def test_missing_agent_ref_lists_the_configured_agents() -> None:
    r = row()
    del r["agent_ref"]
    [v] = problems(jsonl(r))
    assert (v.file, v.key, v.code) == ("rows.jsonl:1", "agent_ref", "GR-DATASET-MISSING-FIELD")
    assert "vf_agent, weather_agent" in v.hint


def test_agent_ref_type_must_be_agents() -> None:
    [v] = problems(jsonl(row(agent_ref={"type": "resources_servers", "name": "weather_agent"})))
    assert v.key == "agent_ref.type"


def test_input_items_must_be_messages_or_typed() -> None:
    [v] = problems(jsonl(row(responses_create_params={"input": [{"role": "user", "content": "x"}, "oops"]})))
    assert v.key == "responses_create_params.input[1]"


def test_bool_is_not_an_integer() -> None:
    [v] = problems(jsonl(row(task_idx=True)))
    assert v.key == "task_idx"


def vf_row(**kw) -> dict:
    return row(agent_ref={"type": "responses_api_agents", "name": "vf_agent"}, **kw)


def test_verifiers_rows_need_task_idx_and_matching_vf_env_id() -> None:
    assert len(parse_rows(jsonl(vf_row(task_idx=0, vf_env_id="tiny-math"), vf_row(task_idx=1)), "r", AGENTS)) == 2
    found = problems(jsonl(vf_row(vf_env_id="ascii-tree")))
    assert {(v.key, v.code) for v in found} == {
        ("vf_env_id", "GR-DATASET-VF-ENV-ID"),
        ("task_idx", "GR-DATASET-MISSING-FIELD"),
    }
    mismatch = next(v for v in found if v.key == "vf_env_id")
    assert "'ascii-tree' != expected 'tiny-math'" in mismatch.message and "vf_agent" in mismatch.message


def test_vf_env_id_falls_back_to_the_manifest() -> None:
    agents = {"vf": Agent("verifiers_agent")}
    ref = {"type": "responses_api_agents", "name": "vf"}
    [v] = problems(jsonl(row(agent_ref=ref, task_idx=0, vf_env_id="b")), agents, manifest_vf="a")
    assert "metadata.vf_env_id" in v.message
    [v] = problems(jsonl(row(agent_ref=ref, task_idx=0)), agents)
    assert v.key == "vf_env_id" and "no vf_env_id in its config" in v.message


def test_report_is_capped_but_counts_everything() -> None:
    text = jsonl(*["[]"] * 80)
    with pytest.raises(DatasetError) as e:
        parse_rows(text, "r", AGENTS)
    assert len(e.value.violations) == 50 and "80 problems on 80 lines (first 50 shown)" in e.value.message


def test_empty_file_is_an_error() -> None:
    with pytest.raises(DatasetError, match="holds no rows"):
        parse_rows("\n\n", "r", AGENTS)


def test_load_rows_file_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not found") as ei:
        load_rows(tmp_path / "nope.jsonl", AGENTS)
    assert str(tmp_path / "nope.jsonl") in str(ei.value) and "--dataset" in ei.value.hint  # not "pass --dataset"
    assert "current directory" in ei.value.hint
    with pytest.raises(DatasetError, match="directory"):
        load_rows(tmp_path, AGENTS)
    bad = tmp_path / "bin.jsonl"
    bad.write_bytes(b"\xff\xfe{}")
    with pytest.raises(DatasetError, match="not UTF-8"):
        load_rows(bad, AGENTS)
    good = tmp_path / "ok.jsonl"
    good.write_text(jsonl(row()))
    assert load_rows(good, AGENTS)[0].data == row()


def test_render_names_line_and_field() -> None:
    with pytest.raises(DatasetError) as e:
        parse_rows(
            jsonl(row(), row(agent_ref={"type": "responses_api_agents", "name": "nobody"})), "rows.jsonl", AGENTS
        )
    text = e.value.render()
    assert "[GR-DATASET-AGENT-REF] rows.jsonl:2: agent_ref.name: agent 'nobody'" in text


@pytest.mark.parametrize(
    ("line", "said"), [("[" * 100_000, "nested too deeply"), ('{"task_idx": 1' + "0" * 5000 + "}", "Exceeds the limit")]
)
def test_json_the_parser_cannot_take_is_a_row_error_not_a_traceback(line: str, said: str) -> None:
    """Found by the fuzz suite: a line nested past the parser's recursion limit, or holding a number
    of more than 4300 digits, raised RecursionError / ValueError out of the dry-run."""
    [v] = problems(jsonl(row(), line))
    assert v.code == "GR-DATASET-JSON" and v.file == "rows.jsonl:2" and said in v.message
