"""A nested implementation runs like any other: NeMo Gym 0.7.0's conversational tool-use simulation,
whose agent is ``conversational_tool_use/simulation`` (the tree
``responses_api_agents/conversational_tool_use/simulation/``, whose requirements point at the Gym
checkout with ``../../../``), is found, built, started and scores a row under ``dry-run``.

The package is the catalog sweep's (:func:`tests.helpers.gym_package.assemble_tree_package`: the
resources server's tree and config, every tree it names, unchanged) with the environment server
served by the built-in relay instead of Gym's ``legacy_agent`` (which the catalog sweep and
tests/daemon/test_ray_undeclared.py run). The parity of its config with
Gym's parser is tests/config/test_gym_parity.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.examples.conftest import dry_run
from tests.helpers.gym_bundle import gym_wheel_of
from tests.helpers.gym_package import assemble_tree_package
from tests.helpers.gym_python import current_gym_python  # noqa: F401 - a fixture

pytestmark = [pytest.mark.pypi, pytest.mark.slow]
TREE = "conversational_tool_use_simulation"


def test_a_nested_implementation_scores_a_row_under_dry_run(tmp_path: Path, current_gym_python) -> None:
    pkg, rows = assemble_tree_package(gym_wheel_of("0.7.0"), TREE, f"{TREE}.yaml", tmp_path / "pkg")
    agent = pkg / "responses_api_agents/conversational_tool_use/simulation"
    assert (agent / "app.py").is_file() and "../../../" in (agent / "requirements.txt").read_text()
    assert not (pkg / "responses_api_agents/conversational_tool_use/requirements.txt").exists()  # a group only
    shutil.rmtree(pkg / "environment_servers")  # the built-in relay serves the environment server
    dataset, out = tmp_path / "rows.jsonl", tmp_path / "out.jsonl"
    dataset.write_text(json.dumps(rows[0]) + "\n")
    assert rows[0]["agent_ref"]["name"] == "conversational_tool_use_agent"
    run = dry_run(pkg, dataset, "--samples", "1", "--json", "--out", str(out), timeout=1500)
    assert run.code == 0, run.stderr[-4000:]
    assert "conversational_tool_use_agent: ready in" in run.stderr
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(results) == 1 and results[0]["error"] is None, results
    assert 0.0 <= results[0]["reward"] <= 1.0
