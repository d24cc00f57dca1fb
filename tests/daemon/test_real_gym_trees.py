"""Real NeMo Gym 0.4.0 trees that NeMo Gym's own launcher runs, under ``gym-runtime up``.

- ``arc_agi``: its ``requirements.txt`` is the single line ``-e ../../`` (the Gym SDK, unnamed),
  installed as the pinned ``nemo-gym``; ``validate`` says valid and a row gets a reward.
- ``code_gen``: it checks the model's code in Ray tasks defined in its own ``lcb_integration``
  package. The stub model answers the row's code block (``[stub:echo_block]``): a correct
  solution gets reward 1.0 at the best isolation (Ray servers run at ``partial``) and at ``none``,
  and every server stops before the Ray head (none "ignored SIGTERM").

Each tree comes from the PyPI wheel, packaged unchanged with its agent and ``vllm_model``
(``tests/helpers/gym_package.py``); venvs are shared with ``test_real_gym.py`` in the test cache.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from gym_runtime.cli.main import main
from tests.daemon.test_real_gym import gym_env
from tests.helpers.daemon import descendants, kill_tree, read_ready_line, up_process, wait_gone
from tests.helpers.gym_package import assemble_tree_package, gym_wheel, python_312_plus
from tests.helpers.gym_python import current_gym_python  # noqa: F401 - a fixture

pytestmark = [pytest.mark.pypi, pytest.mark.slow]

SOLUTION = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
SUM_ROW = {
    "responses_create_params": {
        "input": [
            {
                "role": "user",
                "content": (
                    "Read two integers a and b from one line and print a + b.\n"
                    f"You must use ```python for just the final solution code block.\n[stub:echo_block]\n{SOLUTION}"
                ),
            }
        ]
    },
    "verifier_metadata": {"unit_tests": {"inputs": ["1 2\n", "40 2\n"], "outputs": ["3\n", "42\n"]}},
}


@pytest.fixture(scope="module")
def python() -> str:
    found = python_312_plus()
    if found is None:
        pytest.skip("no Python >= 3.12 under pyenv (nemo-gym 0.4.0 requires it)")
    return found


def _run_rows(head: str, agent: str, rows: list[dict]) -> list[dict]:
    ref = {"type": "responses_api_agents", "name": agent}
    r = httpx.post(
        head + "/rollouts/run",
        json={"examples": [{**row, "agent_ref": ref} for row in rows]},
        timeout=900,
        trust_env=False,
    )
    return json.loads(r.text)["results"]


def _stop(proc) -> tuple[str, float]:
    tree = [p.pid for p in descendants(proc.pid)]
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    code = proc.wait(60)
    took = time.monotonic() - t0
    err = proc.stderr.read()
    assert code == 0, err[-4000:]
    assert wait_gone(tree, 10.0) == []
    return err, took


def test_arc_agi_sdk_line_builds_and_serves(python: str, tmp_path: Path, capsys, current_gym_python) -> None:
    pkg, rows = assemble_tree_package(gym_wheel(python), "arc_agi", "arc_agi.yaml", tmp_path / "pkg")
    assert (pkg / "resources_servers/arc_agi/requirements.txt").read_text().strip() == "-e ../../"
    assert main(["validate", str(pkg)]) == 0
    capsys.readouterr()
    proc = up_process(pkg, tmp_path, "--python", python, "--shutdown-grace", "15", env=gym_env(tmp_path))
    try:
        info = json.loads(read_ready_line(proc, timeout=1200))
        (res,) = _run_rows(info["head_server"], "arc_agi_simple_agent", rows[:1])
        assert "error" not in res, res
        assert isinstance(res["reward"], float)  # the stub does not solve ARC: a 0.0, but a verified one
        err, _ = _stop(proc)
        assert "ignored SIGTERM" not in err
    finally:
        kill_tree(proc)


@pytest.mark.parametrize("isolation", [None, "none"], ids=["best", "none"])
def test_code_gen_ray_tasks_import_the_tree(python: str, tmp_path: Path, isolation: str | None) -> None:
    pkg, _ = assemble_tree_package(gym_wheel(python), "code_gen", "code_gen.yaml", tmp_path / "pkg")
    # a grace long enough for a Ray driver's exit on a loaded host (ray.shutdown at interpreter exit
    # takes seconds), short enough that a driver hanging without its head is still "ignored SIGTERM"
    args = ["--python", python, "--shutdown-grace", "15", *(["--isolation", isolation] if isolation else [])]
    proc = up_process(pkg, tmp_path, *args, env=gym_env(tmp_path))
    try:
        info = json.loads(read_ready_line(proc, timeout=1200))
        assert info["ray"]["mode"] == "local" and (isolation is None or info["isolation"] == isolation)
        wrong = {**SUM_ROW, "verifier_metadata": {"unit_tests": {"inputs": ["1 2\n"], "outputs": ["4\n"]}}}
        right, off = _run_rows(info["head_server"], "code_gen_simple_agent", [SUM_ROW, wrong])
        assert "error" not in right, right  # was: 500 RayTaskError ... No module named 'lcb_integration'
        assert right["reward"] == 1.0 and off["reward"] == 0.0, (right, off)
        err, took = _stop(proc)
        assert "ignored SIGTERM" not in err, err[-3000:]  # servers stop before the Ray head they use
        assert took < 40, err[-3000:]  # a hang detector, not a speed target
    finally:
        kill_tree(proc)
