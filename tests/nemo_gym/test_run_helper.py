"""``gym_runtime.nemo_gym.RunHelper`` in process, as NeMo RL's actor calls it: ``start`` returns once
every server is ready (called from a thread whose event loop is running, as in an async Ray actor),
``poll`` raises once a server failed for good, ``shutdown`` leaves no process, a failed start
stops what it started and raises a picklable ``GR-*`` error, and a ``shutdown`` from another
thread during ``start`` stops that start and waits for it.

The environment is the built-in quickstart's trees laid out without a manifest (tests/nemo_gym/test_job.py)
and two stub model processes as the policy's replicas (a list ``policy_base_url``). Gym's own
trees and collector, and Ray: tests/nemo_gym/test_nemo_rl_spinup.py.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from omegaconf import DictConfig

from gym_runtime.errors import GymRuntimeError
from gym_runtime.nemo_gym import GlobalConfigDictParserConfig, RunHelper
from tests.helpers.environments import StubEndpoint
from tests.nemo_gym.spinup import kill_for_good
from tests.nemo_gym.test_job import ARITH, POLICY, trees

pytestmark = [pytest.mark.pypi, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture
def gym_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = trees(tmp_path)
    monkeypatch.chdir(root)  # NeMo RL's actor runs Gym from its checkout: config_paths are relative to it
    monkeypatch.setenv("GYM_RUNTIME_VENV_DIR", str(Path(os.environ["GYM_RUNTIME_HOME"]).parent / "shared-venvs"))
    return root


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[list[str]]:
    with StubEndpoint(tmp_path, "acme") as a, StubEndpoint(tmp_path, "acme") as b:
        yield [a.url, b.url]


def parser_config(replicas: list[str], tmp: Path, **more) -> GlobalConfigDictParserConfig:
    initial = {
        "config_paths": [POLICY, ARITH],
        "policy_model_name": "acme",
        "policy_api_key": "dummy_key",
        "policy_base_url": replicas,
        "default_host": "127.0.0.1",
        "port_range_low": 5000,
        "port_range_high": 5999,
        "global_aiohttp_connector_limit_per_host": 16384,
        "global_aiohttp_connector_limit": 65536,
        "head_server": {"host": "0.0.0.0", "port": 0},
        "nemo_gym_log_dir": str(tmp / "gym-logs"),
        **more,
    }
    return GlobalConfigDictParserConfig(
        dotenv_path=tmp / "nemo_gym_env.yaml", initial_global_config_dict=DictConfig(initial), skip_load_from_cli=True
    )


def mine() -> set[int]:
    """This test process's live descendants."""
    return {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}


def row(a: int, b: int) -> dict:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": f"What is {a} + {b}?"}]},
        "expected": a + b,
        "agent_ref": {"type": "responses_api_agents", "name": "arithmetic_agent"},
    }


def test_start_poll_kill_for_good_and_shutdown_leave_nothing(
    gym_root: Path, replicas: list[str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    before = mine()
    rh = RunHelper()
    try:

        async def spinup() -> None:  # a running event loop in the calling thread, as in an async Ray actor
            rh.start(parser_config(replicas, tmp_path))

        asyncio.run(spinup())
        rh.poll()
        head = rh.head_url.replace("0.0.0.0", "127.0.0.1")
        assert httpx.get(head + "/health", trust_env=False).status_code == 200
        rows = [row(2, 3), row(4, 4), row(1, 6), row(5, 5)]
        results = httpx.post(head + "/rollouts/run", json={"examples": rows}, timeout=300, trust_env=False).json()
        assert len(results["results"]) == 4 and all(r["reward"] in (0.0, 1.0) for r in results["results"]), results
        assert (tmp_path / "gym-logs" / "logs" / "arithmetic.log").is_file()  # nemo_gym_log_dir is the run's
        rh.display_server_instance_info()
        shown = capsys.readouterr().out
        assert "# Server Instances" in shown and "arithmetic (resources_servers/example_arithmetic)" in shown

        failure = kill_for_good(rh, "arithmetic")
        assert isinstance(failure, GymRuntimeError) and failure.code.startswith("GR-START")
        assert "arithmetic" in failure.message
        again = pickle.loads(pickle.dumps(failure))
        assert (type(again), again.code, again.message) == (type(failure), failure.code, failure.message)
    finally:
        rh.shutdown()
    assert mine() - before == set()
    rh.shutdown()  # a second call is a no-op


def test_a_failed_start_stops_what_it_started_and_raises_a_picklable_error(
    gym_root: Path, replicas: list[str], tmp_path: Path
) -> None:
    before = mine()
    rh = RunHelper()
    with pytest.raises(GymRuntimeError) as e:  # Gym's `server_spinup_timeout_seconds`: a deadline no start meets
        rh.start(parser_config(replicas, tmp_path, server_spinup_timeout_seconds=0.01))
    assert e.value.code == "GR-START-TIMEOUT", e.value.render()
    assert pickle.loads(pickle.dumps(e.value)).render() == e.value.render()
    assert mine() - before == set()
    with pytest.raises(GymRuntimeError) as e:
        rh.poll()
    assert e.value.code == "GR-NEMOGYM-NOT-STARTED"
    rh.shutdown()


def test_a_shutdown_during_start_stops_it_and_waits_for_it(gym_root: Path, replicas: list[str], tmp_path: Path) -> None:
    before = mine()
    rh = RunHelper()
    raised: list[BaseException] = []

    def start() -> None:
        try:
            rh.start(parser_config(replicas, tmp_path))
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            raised.append(e)

    starter = threading.Thread(target=start)
    starter.start()
    try:
        deadline = time.monotonic() + 300
        while not (rh._runtime and rh._runtime.env and rh._runtime.env.supervisor.members):  # servers spawning
            assert time.monotonic() < deadline and starter.is_alive(), raised
            time.sleep(0.05)
        rh.shutdown()
        assert not starter.is_alive()  # shutdown() returned after start() left
    finally:
        rh.shutdown()
        starter.join(60)
    assert len(raised) == 1 and isinstance(raised[0], GymRuntimeError), raised
    assert raised[0].code == "GR-START-INTERRUPTED"
    assert mine() - before == set()
