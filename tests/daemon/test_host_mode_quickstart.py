"""``up examples/native-quickstart --host-mode nmp`` with the built-in stub model as policy: the
bundled example behind NMP's host contract, its built-in servers in venvs from PyPI. ``/health``
answers 503 ``starting`` as soon as the head server's address is printed, then 200 ``ready``;
rows come back joined on ``_rowidx``; SIGTERM leaves nothing."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import pytest

from tests.daemon.test_host_mode import first_line
from tests.helpers.daemon import descendants, kill_tree, up_process, wait_gone
from tests.helpers.gym_package import cache_dir

pytestmark = [pytest.mark.pypi, pytest.mark.slow]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_quickstart_behind_the_host_contract(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (EXAMPLES / "native-quickstart.jsonl").read_text().splitlines()]
    rows = [{**row, "_rowidx": 100 + i} for i, row in enumerate(rows)]
    env = {
        "GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs"),
        "GYM_RUNTIME_HOME": str(tmp_path / "home"),
        "NMP_GYM_GLOBAL_CONFIG": "policy_model_name: acme-policy\nport_range_low: 5000\nport_range_high: 5999\n",
    }
    proc = up_process(EXAMPLES / "native-quickstart", tmp_path, "--host-mode", "nmp", env=env)
    try:
        url = first_line(proc)["head_server"]
        assert 5000 <= int(url.rsplit(":", 1)[1]) <= 5999
        r = httpx.get(url + "/health", timeout=10, trust_env=False)  # the servers cannot be up yet
        assert r.status_code == 503 and r.json()["status"] == "starting"
        info = first_line(proc, timeout=600)
        assert info["status"] == "ready" and info["policy_model"]["stub"] is True
        r = httpx.get(url + "/health", timeout=10, trust_env=False)
        assert r.status_code == 200 and r.json()["status"] == "ready"
        r = httpx.post(url + "/rollouts/run", json={"examples": rows[::-1]}, timeout=300, trust_env=False)
        answer = json.loads(r.text)
        assert [x["_rowidx"] for x in answer["results"]] == [row["_rowidx"] for row in rows[::-1]]
        assert answer["unfinished"] == [] and all("error" not in x for x in answer["results"]), answer
        assert all(x["reward"] in (0.0, 1.0) for x in answer["results"])
        tree = [p.pid for p in descendants(proc.pid)]
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0
        assert wait_gone(tree, 5.0) == []
    finally:
        kill_tree(proc)
