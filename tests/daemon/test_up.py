"""``gym-runtime up`` as a real subprocess: ready line, Gym's process contract, head endpoints
(masking, rollouts), and shutdown by SIGTERM / SIGINT / SIGKILL with no process left."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from tests.helpers.daemon import (
    SIMPLE_SERVERS,
    descendants,
    kill_tree,
    read_ready_line,
    simple_env,
    up_process,
    wait_gone,
    write_fixture_package,
)

SECRET = "sk-acme-secret-123"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory):
    """One daemon for the read-only head checks: fixture servers, a policy URL and a secret key."""
    tmp = tmp_path_factory.mktemp("up")
    pkg = simple_env(tmp / "pkg")
    proc = up_process(
        pkg,
        tmp,
        "--policy-base-url",
        "http://127.0.0.1:9/v1",
        "--policy-api-key-env",
        "ACME_KEY",
        "--policy-model-name",
        "acme-policy",
        env={"ACME_KEY": SECRET, "GYM_RUNTIME_HOME": str(tmp / "home")},
    )
    try:
        info = json.loads(read_ready_line(proc))
        yield proc, info, tmp
    finally:
        kill_tree(proc)


def test_ready_line_and_contract(daemon) -> None:
    proc, info, tmp = daemon
    assert info["status"] == "ready" and info["isolation"] in ("full", "partial", "none")
    assert set(info["servers"]) == SIMPLE_SERVERS and info["startup_s"] > 0
    assert info["policy_model"] == {"base_url": "http://127.0.0.1:9/v1", "stub": False}
    assert info["gym_release"]["version"] == "0.7.0" and info["gym_release"]["line"] == "0.7"
    seen = json.loads((tmp / "run/servers/acme_math/contract.json").read_text())
    pkg = tmp / "pkg/resources_servers/acme_math"
    assert seen["argv"] == ["app.py"] and Path(seen["cwd"]) == pkg
    env = seen["env"]
    assert env["PYTHONPATH"] == str(pkg) and env["NEMO_GYM_CONFIG_PATH"] == "acme_math"
    assert "RAY_ADDRESS" not in env and not any(k.startswith("UV_") for k in env)
    # bug: Gym's SDK put HF_DATASETS_CACHE under the server's cwd, its read-only directory
    assert env["HF_DATASETS_CACHE"] == str(Path(env["HOME"]) / "huggingface" / "datasets")
    cfg = yaml.safe_load(env["NEMO_GYM_CONFIG_DICT"])
    assert cfg["policy_api_key"] == "****" and SECRET not in env["NEMO_GYM_CONFIG_DICT"]  # not its secret
    for name in ("acme_math", "acme_agent"):
        inner = next(iter(next(iter(cfg[name].values())).values()))
        assert isinstance(inner["port"], int) and inner["host"]
    assert set(cfg["head_server"]) == {"host", "port"} and cfg["dry_run"] is False


def test_secret_never_on_a_command_line(daemon) -> None:
    proc, _, _ = daemon
    for p in [psutil.Process(proc.pid), *descendants(proc.pid)]:
        assert SECRET not in " ".join(p.cmdline())


def test_head_endpoints(daemon) -> None:
    _, info, tmp = daemon
    head = info["head_server"]
    with httpx.Client(base_url=head, trust_env=False, timeout=10) as c:
        assert c.get("/").json() == {"status": "ok"}
        h = c.get("/health")
        assert h.status_code == 200 and h.json()["status"] == "ok"  # Gym 0.7's head status (the default line)
        assert h.json()["egress"][0]["allow"] == "127.0.0.0/8, ::1, localhost"  # the effective allowlist
        text = c.get("/global_config_dict_yaml").json()
        assert isinstance(text, str) and SECRET not in text
        cfg = yaml.safe_load(text)
        assert cfg["policy_api_key"] == "****"
        assert cfg["acme_math"]["resources_servers"]["acme_math"]["port"] == int(
            info["servers"]["acme_math"].rsplit(":", 1)[1]
        )
        rows = {s["process_name"]: s for s in c.get("/server_instances").json()}
        assert rows["acme_agent"]["server_type"] == "responses_api_agents"
        assert rows["acme_math"]["implementation"] == rows["acme_math"]["name"] == "acme_math"
        assert rows["acme_math"]["state"] == "ready" and rows["acme_math"]["status"] is None
        assert rows["acme_math"]["pid"] and rows["acme_math"]["restarts"] == 0
        assert c.get(info["servers"]["acme_math"]).json() == {"status": "ok"}  # the url works from the host
        logs = c.get("/servers/acme_math/logs", params={"tail": 5}).json()
        assert any("fixture acme_math listening" in line for line in logs["lines"])
        unknown = c.get("/servers/nope/logs")  # our error envelope, not FastAPI's {"detail"}
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "GR-HEAD-UNKNOWN-SERVER"
        assert "acme_math" in unknown.json()["error"]["hint"]
        bad = c.get("/servers/acme_math/logs", params={"tail": -1})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "GR-HEAD-BAD-REQUEST"
        assert c.get("/docs").status_code == 200


def test_rollouts_run_turns_an_unusable_reward_into_a_row_error(daemon) -> None:
    """docs/rollouts.md, "Rewards": never ``reward: null`` (or an invalid-JSON NaN) in the results;
    the error names the agent, its resources server and the value."""
    _, info, _ = daemon
    ref = {"type": "responses_api_agents", "name": "acme_agent"}
    rows = [{"agent_ref": ref, "fixture_reward": value} for value in (None, "1", 0.5)]
    r = httpx.post(info["head_server"] + "/rollouts/run", json={"examples": rows}, timeout=60, trust_env=False)
    null, text, fine = json.loads(r.text)["results"]
    assert null == {
        "error": {
            "code": "GR-ROLLOUT-BAD-REWARD",
            "message": "agent 'acme_agent' (resources server 'acme_math') answered an unusable reward: reward is null",
            "status": 502,
        }
    }
    assert text["error"]["message"].endswith("reward is str '1', not a number")
    assert fine["reward"] == 0.5


def test_rollouts_run(daemon) -> None:
    _, info, _ = daemon
    ref = {"type": "responses_api_agents", "name": "acme_agent"}
    rows = [{"agent_ref": ref, "i": i} for i in range(5)] + [{"agent_ref": {"name": "ghost"}}, {"no": "ref"}]
    r = httpx.post(info["head_server"] + "/rollouts/run", json={"examples": rows}, timeout=30, trust_env=False)
    results = json.loads(r.text)["results"]
    assert [x["row"]["i"] for x in results[:5]] == list(range(5)) and results[0]["reward"] == 1.0
    assert results[5]["error"]["code"] == "GR-ROLLOUT-AGENT-REF" and "acme_agent" in results[5]["error"]["message"]
    assert results[6]["error"]["code"] == "GR-ROLLOUT-AGENT-REF"


def _stop_and_check(proc, sig: int, grace_s: float = 10.0) -> tuple[int, float]:
    kids = [p.pid for p in descendants(proc.pid)]
    assert kids
    t0 = time.monotonic()
    os.kill(proc.pid, sig)
    code = proc.wait(grace_s)
    took = time.monotonic() - t0
    assert wait_gone(kids, 2.0) == []
    return code, took


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_once_ready_stops_everything(tmp_path: Path, sig: int) -> None:
    proc = up_process(simple_env(tmp_path / "pkg"), tmp_path)
    try:
        info = json.loads(read_ready_line(proc))
        port = int(info["servers"]["acme_math"].rsplit(":", 1)[1])
        code, took = _stop_and_check(proc, sig)
        assert code == 0 and took < 5
        listening = [
            c
            for c in psutil.net_connections("tcp")
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
        ]
        assert listening == []  # nobody listens on the server's published port any more
    finally:
        kill_tree(proc)


def test_sigterm_during_startup(tmp_path: Path) -> None:
    pkg = simple_env(tmp_path / "pkg", fixture_sleep=30)  # acme_math never binds in time
    proc = up_process(pkg, tmp_path)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (tmp_path / "run/servers/acme_math/contract.json").exists():
            time.sleep(0.05)
        code, took = _stop_and_check(proc, signal.SIGTERM)
        assert code == 130 and took < 5
        assert proc.stdout.read() == ""  # never printed a ready line
    finally:
        kill_tree(proc)


def test_sigkill_of_the_daemon_leaves_no_server(tmp_path: Path) -> None:
    proc = up_process(simple_env(tmp_path / "pkg"), tmp_path)
    try:
        read_ready_line(proc)
        kids = [p.pid for p in descendants(proc.pid)]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        assert wait_gone(kids, 5.0) == []
    finally:
        kill_tree(proc)


def test_failed_server_fails_the_daemon(tmp_path: Path) -> None:
    pkg = write_fixture_package(
        tmp_path / "pkg", {"acme_math": {"resources_servers": {"acme_math": {"domain": "math", "fixture_exit": 0}}}}
    )
    proc = up_process(pkg, tmp_path, "--max-restarts", "1")
    try:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 3 and out == ""
        assert "GR-START-CRASH" in err and "acme_math" in err and "status 0" in err
        assert "fixture: exiting with 0" in err  # the log tail is in the report
        assert err.count("error[GR-START-CRASH]") == 1  # the error block once, not also as a progress line
    finally:
        kill_tree(proc)


def _group(pgid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p)
        except (OSError, psutil.Error):
            pass
    return out


@pytest.mark.parametrize("level", ["best", "none"])
def test_terminal_ctrl_c_stops_cleanly(tmp_path: Path, level: str) -> None:
    """Ctrl-C in a terminal = SIGINT to the whole foreground process group: only the daemon gets it
    (every server has its own group at every level), so the stop is clean: exit 0, no restart,
    nothing left."""
    proc = up_process(simple_env(tmp_path / "pkg"), tmp_path, *(["--isolation", level] if level != "best" else []))
    try:
        read_ready_line(proc)
        kids = [p.pid for p in descendants(proc.pid)]
        assert [p.pid for p in _group(proc.pid)] == [proc.pid]  # the servers are not in the terminal's group
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(10)
        err = proc.stderr.read()
        assert code == 0, err
        assert "restart" not in err and "signal" not in err.replace("SIGINT: stopping", "")
        assert wait_gone(kids, 2.0) == []
    finally:
        kill_tree(proc)


def test_rollouts_bad_body_gets_our_envelope(daemon) -> None:
    _, info, _ = daemon
    url = info["head_server"] + "/rollouts/run"
    for body in ({"rows": []}, {"examples": "nope"}, [1, 2]):
        r = httpx.post(url, json=body, timeout=10, trust_env=False)
        assert r.status_code == 400 and set(r.json()) == {"error"}, r.text
        err = r.json()["error"]
        assert err["code"] == "GR-ROLLOUT-BAD-REQUEST" and '{"examples": [rows]}' in err["message"]
    r = httpx.post(url, content=b"{not json", headers={"content-type": "application/json"}, timeout=10, trust_env=False)
    assert r.status_code == 400 and r.json()["error"]["code"] == "GR-ROLLOUT-BAD-REQUEST"
    assert httpx.get(info["head_server"] + "/servers/x/logs", params={"tail": -1}, trust_env=False).status_code == 422


def test_no_policy_model_no_stub_and_one_warning(tmp_path: Path) -> None:
    """A package with no policy_model instance (and no reference to one) gets no stub model; the
    level-none warning is printed once."""
    proc = up_process(simple_env(tmp_path / "pkg"), tmp_path, "--isolation", "none")
    try:
        info = json.loads(read_ready_line(proc))
        assert info["policy_model"] == {"base_url": None, "stub": False}
        names = [
            s["process_name"] for s in httpx.get(info["head_server"] + "/server_instances", trust_env=False).json()
        ]
        assert sorted(names) == sorted(SIMPLE_SERVERS)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(10) == 0
        err = proc.stderr.read()
    finally:
        kill_tree(proc)
    assert "the built-in stub model is not started" in err and "starting the built-in stub model" not in err
    assert err.count("EGRESS NOT ENFORCED") == 1
