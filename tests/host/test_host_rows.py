"""Host-mode answers join each result to its row by ``_rowidx`` (the host's pairing wins), and a
deadline's cut rows are listed, not lost."""

from __future__ import annotations

import socket

import pytest

from gym_runtime.errors import StartError
from gym_runtime.host.mode import bind_in_range
from gym_runtime.host.rows import keyed_answer, row_keys


def test_row_keys_default_to_positions_and_must_be_unique() -> None:
    assert row_keys([{"_rowidx": 7}, {}, {"_rowidx": "x"}]) == [7, 1, "x"]
    with pytest.raises(ValueError, match="1 appear"):
        row_keys([{"_rowidx": 1}, {}])
    with pytest.raises(ValueError, match=r"examples\[0\]._rowidx must be an integer or a string, got bool"):
        row_keys([{"_rowidx": True}])
    with pytest.raises(ValueError, match="got list"):
        row_keys([{"_rowidx": [1]}])


def test_results_carry_the_rows_identity_and_cut_rows_are_unfinished() -> None:
    rows = [{"_rowidx": 4, "_sg_example_id": 40, "_ng_task_index": 2}, {"_rowidx": 5}, {"_rowidx": 6}]
    finished = [{"reward": 1.0, "_rowidx": 99, "_ng_task_index": 7}, None, {"error": {"code": "GR-ROLLOUT-HTTP"}}]
    answer = keyed_answer(rows, [4, 5, 6], finished, 30.0, {"rollouts": 3})
    assert answer["results"] == [
        {"reward": 1.0, "_rowidx": 4, "_ng_task_index": 7, "_sg_example_id": 40},  # the agent's echo loses
        {"error": {"code": "GR-ROLLOUT-HTTP"}, "_rowidx": 6},
    ]
    assert answer["unfinished"][0]["_rowidx"] == 5
    assert answer["unfinished"][0]["error"]["code"] == "GR-ROLLOUT-DEADLINE"
    assert "2 of 3 row(s) finished" in answer["error"]["message"] and answer["summary"] == {"rollouts": 3}
    assert "error" not in keyed_answer(rows[:1], [4], finished[:1], 30.0, {})


def test_head_port_is_the_first_free_one_of_the_range() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        low = held.getsockname()[1]
        sock = bind_in_range("127.0.0.1", low, low + 20)
        try:
            assert low < sock.getsockname()[1] <= low + 20
        finally:
            sock.close()
        with pytest.raises(StartError) as e:
            bind_in_range("127.0.0.1", low, low)
        assert e.value.code == "GR-HOST-NO-PORT" and f"{low}-{low}" in e.value.message


def test_a_shutdown_cut_names_its_own_code_and_has_no_summary() -> None:
    answer = keyed_answer([{"_rowidx": 1}, {"_rowidx": 2}], [1, 2], [{"reward": 0.0}, None], 30.0, None, True)
    assert [x["_rowidx"] for x in answer["results"]] == [1] and "summary" not in answer
    assert answer["unfinished"][0]["error"]["code"] == answer["error"]["code"] == "GR-ROLLOUT-SHUTDOWN"
