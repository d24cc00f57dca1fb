"""What a trainer sees when a rollout fails, through NeMo Gym 0.7.0's own collector and through
``POST /rollouts/run``, on the bundled example's built-in servers (docs/rollouts.md, "Failure
classes").

One ``gym-runtime up`` serves every case (module scope): ``examples/native-quickstart`` (the
built-in stub model as policy) plus two agents of its own, each behind a built-in
``legacy_agent`` relay as the example's are: ``gone_agent``, whose model server's policy endpoint
is gone (``http://127.0.0.1:1/v1``, ``retry_deadline_seconds: 3`` standing for the default 600 s),
and ``strict_agent``, whose model server passes a context overflow on
(``propagate_context_overflow_errors``). Gym 0.7.0's ``RolloutCollectionHelper.run_examples`` (as
NeMo RL calls it, in a venv holding ``nemo-gym==0.7.0``) posts each row to the environment server
fronting its agent; a row that fails raises, and the status it carries is classified by NeMo RL's
rule (>= 500, 408, 429: infrastructure; any other 4xx: data; no status, a connection error:
infrastructure; anything else: data).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from gym_runtime.rollouts.failure_class import failure_class
from tests.helpers.daemon import kill_tree, read_ready_line, up_process
from tests.helpers.gym_package import cache_dir, gym_venv

pytestmark = [pytest.mark.pypi, pytest.mark.slow, pytest.mark.timeout(1800)]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GONE_DEADLINE_S = 3

EXTRA = {
    "policy_gone": {
        "responses_api_models": {
            "vllm_model": {
                "entrypoint": "app.py",
                "base_url": "http://127.0.0.1:1/v1",  # nothing listens on port 1: the endpoint is gone
                "api_key": "${policy_api_key}",
                "model": "${policy_model_name}",
                "retry_deadline_seconds": GONE_DEADLINE_S,
            }
        }
    },
    "policy_strict": {
        "responses_api_models": {
            "vllm_model": {
                "entrypoint": "app.py",
                "base_url": "${policy_base_url}",
                "api_key": "${policy_api_key}",
                "model": "${policy_model_name}",
                "propagate_context_overflow_errors": True,
            }
        }
    },
}
for _name, _model in (("gone", "policy_gone"), ("strict", "policy_strict")):
    EXTRA[f"{_name}_agent"] = {
        "responses_api_agents": {
            "simple_agent": {
                "entrypoint": "app.py",
                "resources_server": {"type": "resources_servers", "name": "arithmetic"},
                "model_server": {"type": "responses_api_models", "name": _model},
                "max_steps": 2,
            }
        }
    }
    EXTRA[f"{_name}_environment_server"] = {
        "environment_servers": {
            "legacy_agent": {
                "entrypoint": "app.py",
                "agent_server": {"type": "responses_api_agents", "name": f"{_name}_agent"},
            }
        }
    }

COLLECT = r"""
import asyncio, json, sys, time
from nemo_gym.rollout_collection import RolloutCollectionHelper
from nemo_gym.server_utils import BaseServerConfig
args = json.loads(sys.argv[1])

async def one(row):
    t0 = time.monotonic()
    try:
        for task in RolloutCollectionHelper().run_examples(
                examples=[row], head_server_config=BaseServerConfig(host=args["host"], port=args["port"])):
            _, result = await task
        return {"ok": True, "reward": result.get("reward"), "s": time.monotonic() - t0}
    except Exception as e:
        body = getattr(e, "response_content", None)
        return {"ok": False, "type": type(e).__name__, "status": getattr(e, "status", None),
                "body": body.decode("utf-8", "replace")[:3000] if body else None, "s": time.monotonic() - t0}

async def main():
    print(json.dumps([await one(row) for row in args["rows"]]))

asyncio.run(main())
"""


def trainer_class(outcome: dict) -> str:
    """NeMo RL's class of a failed ``/run`` (its driver's rule, docs/rollouts.md "Failure classes")."""
    if outcome["status"] is not None:
        return failure_class(outcome["status"])
    transport = ("ClientConnectionError", "ClientConnectorError", "ClientOSError", "ServerDisconnectedError")
    return "infrastructure" if outcome["type"] in transport else "data"


def _package(root: Path) -> Path:
    pkg = shutil.copytree(EXAMPLES / "native-quickstart", root / "pkg")
    extra = pkg / "responses_api_models" / "vllm_model" / "configs" / "failure_classes.yaml"
    extra.write_text(yaml.safe_dump(EXTRA, sort_keys=False))
    manifest = yaml.safe_load((pkg / "nemo-environment.yaml").read_text())
    manifest["config_paths"].append(str(extra.relative_to(pkg)))
    (pkg / "nemo-environment.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return pkg


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The head server of ``up`` on the example and its failing agents (module doc)."""
    tmp = tmp_path_factory.mktemp("failure-classes")
    proc = up_process(
        _package(tmp),
        tmp,
        "--model-endpoint-timeout",
        "0",  # policy_gone's endpoint is gone on purpose
        env={"GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs"), "GYM_RUNTIME_HOME": str(tmp / "home")},
    )
    try:
        yield json.loads(read_ready_line(proc, timeout=900))["head_server"]
    finally:
        kill_tree(proc)


def rows() -> dict[str, dict]:
    """One row per case, by name (each names its agent as NeMo RL's rows do)."""
    quick = [json.loads(line) for line in (EXAMPLES / "native-quickstart.jsonl").read_text().splitlines() if line]
    good = next(r for r in quick if r["agent_ref"]["name"] == "arithmetic_agent")

    def on(agent: str, **params) -> dict:
        return {
            **good,
            "agent_ref": {"type": "responses_api_agents", "name": agent},
            "responses_create_params": {**good["responses_create_params"], **params},
        }

    return {
        "scored": on("arithmetic_agent"),
        "input_a_number": on("arithmetic_agent", input=5),
        "metadata_not_json": on("arithmetic_agent", metadata={"extra_body": "{not json"}),
        "past_the_context": on("strict_agent", input=[{"role": "user", "content": "x " * 20_000}]),
        "policy_gone": on("gone_agent"),
        "no_such_agent": on("nobody_agent"),
    }


# case -> (status a trainer gets, its class)
EXPECTED = {
    "input_a_number": (422, "data"),
    "metadata_not_json": (422, "data"),
    "past_the_context": (400, "data"),
    "policy_gone": (502, "infrastructure"),
}


def test_gyms_collector_raises_the_status_of_each_failure_class(head: str) -> None:
    venv = gym_venv("0.7.0")
    if venv is None:
        pytest.skip("no Python that nemo-gym 0.7.0 accepts (run .ci/provision-python)")
    cases = rows()
    host, port = head.removeprefix("http://").rsplit(":", 1)
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            COLLECT,
            json.dumps({"rows": list(cases.values()), "host": host, "port": port}),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "NO_PROXY": "*"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = dict(zip(cases, json.loads(done.stdout.splitlines()[-1]), strict=True))
    assert got["scored"]["ok"] and got["scored"]["reward"] in (0.0, 1.0), got["scored"]
    for case, (status, cls) in EXPECTED.items():
        outcome = got[case]
        assert not outcome["ok"] and (outcome["status"], trainer_class(outcome)) == (status, cls), (case, outcome)
    # the agent no server hosts never reaches the environment: Gym's collector finds no server for it
    assert got["no_such_agent"]["status"] is None and trainer_class(got["no_such_agent"]) == "data"
    gone = json.loads(got["policy_gone"]["body"])["error"]
    assert gone["type"] == "model_unavailable" and f"retry deadline of {GONE_DEADLINE_S}s" in gone["message"]
    assert got["policy_gone"]["s"] < GONE_DEADLINE_S + 30  # bounded: the deadline and one connect timeout
    assert "metadata.extra_body is not valid JSON" in got["metadata_not_json"]["body"]
    assert "context" in got["past_the_context"]["body"]


def test_rollouts_run_gives_each_failed_row_its_status(head: str) -> None:
    cases = rows()
    r = httpx.post(head + "/rollouts/run", json={"examples": list(cases.values())}, timeout=600, trust_env=False)
    assert r.status_code == 200
    got = dict(zip(cases, json.loads(r.text)["results"], strict=True))
    assert "error" not in got["scored"]
    expected = {
        "input_a_number": ("GR-ROLLOUT-HTTP", 422),
        "metadata_not_json": ("GR-ROLLOUT-HTTP", 422),
        "past_the_context": ("GR-ROLLOUT-HTTP", 400),
        "policy_gone": ("GR-ROLLOUT-POLICY-UNAVAILABLE", 502),
        "no_such_agent": ("GR-ROLLOUT-AGENT-REF", 422),
    }
    assert {case: (got[case]["error"]["code"], got[case]["error"]["status"]) for case in expected} == expected


def test_a_row_past_the_batch_deadline_is_a_504(head: str) -> None:
    t0 = time.monotonic()
    body = {"examples": [rows()["policy_gone"]], "deadline_s": 1}
    r = httpx.post(head + "/rollouts/run", json=body, timeout=120, trust_env=False)
    (result,) = json.loads(r.text)["results"]
    assert (result["error"]["code"], result["error"]["status"]) == ("GR-ROLLOUT-DEADLINE", 504)
    assert time.monotonic() - t0 < GONE_DEADLINE_S + 10


def test_an_agent_killed_under_its_row_is_a_502_from_its_relay(head: str) -> None:
    """The agent dies while it holds the row (its model server is still retrying the gone
    endpoint): the relay in front of it answers 502 naming it, a failure a trainer retries as
    infrastructure; the daemon restarts the agent. Last in the module: it costs a restart."""
    (agent,) = [
        s
        for s in httpx.get(head + "/server_instances", timeout=10, trust_env=False).json()
        if s["process_name"] == "gone_agent"
    ]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        sent = pool.submit(
            httpx.post, head + "/rollouts/run", json={"examples": [rows()["policy_gone"]]}, timeout=120, trust_env=False
        )
        time.sleep(1.0)  # the row is in the agent, waiting on its model server
        os.kill(agent["pid"], signal.SIGKILL)
        (result,) = json.loads(sent.result().text)["results"]
    assert (result["error"]["code"], result["error"]["status"]) == ("GR-ROLLOUT-HTTP", 502), result
    assert "gone_environment_server" in result["error"]["message"]
    assert "upstream gone_agent" in result["error"]["message"] and "closed the connection" in result["error"]["message"]
