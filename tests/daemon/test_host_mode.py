"""``gym-runtime up PKG --host-mode nmp`` as a real subprocess: NMP's sandboxed Gym host contract.

The global config comes from ``NMP_GYM_GLOBAL_CONFIG``; the head server binds in the port range
and answers ``/health`` before anything else (``starting`` -> ``ready``, or ``failed`` with the
error block, not a hang); ``/rollouts/run`` writes heartbeat spaces, stops at the rollout deadline
with the rows that finished and joins results on ``_rowidx``. The fixture agent holds a row (or
its own start) until the test creates a file in its ``gates/`` directory, so no test guesses a
time.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.daemon import FIXTURE_APP, descendants, kill_tree, up_process, wait_gone, write_fixture_package

# the fixture agent: its start waits for gates/start, a row naming a "gate" waits for gates/<gate>
GATED_APP = FIXTURE_APP.replace(
    'time.sleep(float(row.get("sleep", 0)))',
    'gate = row.get("gate")\n'
    '        while gate and not os.path.exists(os.path.join(os.getcwd(), "gates", gate)):\n'
    "            time.sleep(0.02)",
).replace(
    'ThreadingHTTPServer((cfg["host"]',
    'while not os.path.exists(os.path.join(os.getcwd(), "gates", "start")):\n'
    "    time.sleep(0.02)\n"
    'ThreadingHTTPServer((cfg["host"]',
)
assert GATED_APP.count("gates") == 2
AGENT_REF = {"type": "responses_api_agents", "name": "acme_agent"}


def gated_env(root: Path) -> tuple[Path, Path]:
    """A resources server and the gated agent; returns ``(package, the agent's gates/ dir)``."""
    pkg = write_fixture_package(
        root,
        {
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math"}}},
            "acme_agent": {
                "responses_api_agents": {
                    "acme_agent": {"resources_server": {"type": "resources_servers", "name": "acme_math"}}
                }
            },
        },
        apps={"acme_agent": GATED_APP},
    )
    gates = pkg / "responses_api_agents/acme_agent/gates"
    gates.mkdir()
    return pkg, gates


def host_env(tmp: Path, global_config: str | dict) -> dict[str, str]:
    text = global_config if isinstance(global_config, str) else json.dumps(global_config)
    return {"NMP_GYM_GLOBAL_CONFIG": text, "GYM_RUNTIME_HOME": str(tmp / "home")}


def first_line(proc, timeout: float = 120.0) -> dict:
    """The next stdout line of ``up`` as JSON (AssertionError with stderr when there is none)."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout):
        raise AssertionError("no line in time; stderr:\n" + proc.stderr.read())
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        raise AssertionError(f"up exited {proc.returncode} without a line; stderr:\n" + proc.stderr.read())
    return json.loads(line)


def health_until(url: str, status: str, timeout: float = 120.0) -> httpx.Response:
    """``GET /health`` until its status is ``status`` or ``failed`` (the condition, polled; a
    deadline bounds it)."""
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.get(url + "/health", timeout=10, trust_env=False)
        if r.json().get("status") in (status, "failed") or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory):
    """One host-mode daemon over the gated package; its agent's start is held until a test lets it go.
    The head port range starts at a port the test holds, so the head server takes the next one."""
    tmp = tmp_path_factory.mktemp("host")
    pkg, gates = gated_env(tmp / "pkg")
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    low = held.getsockname()[1]
    manifest_paths = [
        "resources_servers/acme_math/configs/acme_math.yaml",
        "responses_api_agents/acme_agent/configs/acme_agent.yaml",
    ]
    config = {
        "policy_base_url": "http://127.0.0.1:9/v1",
        "policy_model_name": "acme-policy",
        "config_paths": manifest_paths,
        "head_server": {"host": "0.0.0.0", "port": 1},
        "acme_math": {"resources_servers": {"acme_math": {"acme_flavour": "from-global-config"}}},
    }
    proc = up_process(
        pkg,
        tmp,
        "--host-mode",
        "nmp",
        "--head-port-range",
        f"{low}-{low + 40}",
        "--heartbeat-interval",
        "0.2",
        env=host_env(tmp, config),
    )
    try:
        starting = first_line(proc)
        yield {"proc": proc, "tmp": tmp, "gates": gates, "starting": starting, "low": low, "ready": None}
    finally:
        held.close()
        kill_tree(proc)


def ready(host: dict) -> dict:
    """Let the agent start (gates/start) and return the ready line (read once)."""
    if host["ready"] is None:
        (host["gates"] / "start").touch()
        host["ready"] = first_line(host["proc"])
    return host["ready"]


def test_health_answers_starting_at_once_then_ready(host) -> None:
    line = host["starting"]
    url = line["head_server"]
    assert line["status"] == "starting"
    port = int(url.rsplit(":", 1)[1])
    assert host["low"] < port <= host["low"] + 40  # in the range, past the port the test holds
    r = health_until(url, "starting")
    assert r.status_code == 503 and r.json()["status"] == "starting", r.json()
    refused = httpx.post(
        url + "/rollouts/run", json={"examples": [{"agent_ref": AGENT_REF}]}, timeout=10, trust_env=False
    )
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "GR-HEAD-STARTING"
    info = ready(host)
    assert info["status"] == "ready" and info["head_server"] == url
    r = httpx.get(url + "/health", timeout=10, trust_env=False)
    assert r.status_code == 200 and r.json()["status"] == "ready"  # NMP's word, not Gym 0.7's "ok"
    # the global config's layer reached the server; its head_server was not used
    seen = json.loads((host["tmp"] / "run/servers/acme_math/contract.json").read_text())
    assert seen["cfg"]["acme_flavour"] == "from-global-config" and seen["cfg"]["domain"] == "math"


def test_heartbeat_spaces_come_before_the_first_row(host) -> None:
    url = ready(host)["head_server"]
    rows = [
        {"agent_ref": AGENT_REF, "_rowidx": "a", "_sg_example_id": 11},
        {"agent_ref": AGENT_REF, "_rowidx": "b", "gate": "row-b"},
    ]
    with httpx.stream("POST", url + "/rollouts/run", json={"examples": rows}, timeout=60, trust_env=False) as r:
        assert r.status_code == 200
        chunks = r.iter_raw()
        head = b""
        while head.count(b" ") < 2:  # two heartbeats (0.2 s apart) while row b is held
            head += next(chunks)
        assert head.strip() == b"", head  # nothing but whitespace before the rows
        (host["gates"] / "row-b").touch()
        body = head + b"".join(chunks)
    answer = json.loads(body)  # leading whitespace is valid JSON
    assert [x["_rowidx"] for x in answer["results"]] == ["a", "b"]
    assert all(x["reward"] == 1.0 for x in answer["results"]) and answer["unfinished"] == []
    assert answer["results"][0]["_sg_example_id"] == 11 and "error" not in answer


def test_a_batch_past_its_deadline_returns_the_rows_that_finished(host) -> None:
    url = ready(host)["head_server"]
    rows = [
        {"agent_ref": AGENT_REF, "_rowidx": 3},
        {"agent_ref": AGENT_REF, "_rowidx": 9, "gate": "never"},
        {"agent_ref": AGENT_REF},
    ]  # no _rowidx: its position in the batch
    r = httpx.post(url + "/rollouts/run", json={"examples": rows, "deadline_s": 4}, timeout=60, trust_env=False)
    answer = json.loads(r.text)
    assert r.status_code == 200
    assert [x["_rowidx"] for x in answer["results"]] == [3, 2] and all(x["reward"] == 1.0 for x in answer["results"])
    assert answer["unfinished"] == [
        {
            "_rowidx": 9,
            "error": {
                "code": "GR-ROLLOUT-DEADLINE",
                "message": "the rollout deadline of 4s passed before this row finished",
                "status": 504,
            },
        }
    ]
    assert answer["error"]["code"] == "GR-ROLLOUT-DEADLINE" and "2 of 3 row(s) finished" in answer["error"]["message"]


def test_rows_sharing_a_rowidx_are_refused(host) -> None:
    url = ready(host)["head_server"]
    rows = [{"agent_ref": AGENT_REF, "_rowidx": 1}, {"agent_ref": AGENT_REF}]  # the second is position 1
    r = httpx.post(url + "/rollouts/run", json={"examples": rows}, timeout=30, trust_env=False)
    assert r.status_code == 400 and r.json()["error"]["code"] == "GR-ROLLOUT-BAD-REQUEST"
    assert "_rowidx must be unique" in r.json()["error"]["message"]


def _hold_failed(tmp: Path, pkg: Path, config: dict) -> tuple[dict, httpx.Response, list[int]]:
    """Start a host that fails, wait for /health to say failed, check rollouts are refused with the
    same error, then SIGTERM it; returns ``(its failed line, the /health answer, exit code and
    stderr)``."""
    proc = up_process(pkg, tmp, "--host-mode", "nmp", "--head-port", "0", env=host_env(tmp, config))
    try:
        url = first_line(proc)["head_server"]
        r = health_until(url, "failed")
        failed = first_line(proc)
        refused = httpx.post(
            url + "/rollouts/run", json={"examples": [{"agent_ref": AGENT_REF}]}, timeout=10, trust_env=False
        )
        assert refused.status_code == 503 and refused.json()["error"] == r.json()["error"]
        tree = [p.pid for p in descendants(proc.pid)]
        os.kill(proc.pid, signal.SIGTERM)
        code = proc.wait(30)
        err = proc.stderr.read()
    finally:
        kill_tree(proc)
    assert wait_gone(tree, 5.0) == []
    assert "Traceback" not in err
    return failed, r, [code, err]


def test_a_broken_package_gives_failed_with_its_error(tmp_path: Path) -> None:
    pkg, _ = gated_env(tmp_path / "pkg")
    (pkg / "resources_servers/acme_math/configs/acme_math.yaml").unlink()  # the manifest names it
    failed, r, (code, err) = _hold_failed(tmp_path, pkg, {})
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "failed" and body["phase"] == "config"
    assert body["error"]["code"].startswith("GR-PKG") and "acme_math.yaml" in json.dumps(body["error"])
    assert failed == {"status": "failed", "head_server": failed["head_server"], "error": body["error"]}
    assert code == 1 and f"error[{body['error']['code']}]" in err


def test_a_server_that_cannot_start_gives_failed_with_its_error(tmp_path: Path) -> None:
    pkg = write_fixture_package(
        tmp_path / "pkg", {"acme_math": {"resources_servers": {"acme_math": {"domain": "math", "fixture_exit": 3}}}}
    )
    _, r, (code, err) = _hold_failed(tmp_path, pkg, {"policy_model_name": "acme-policy"})
    body = r.json()
    assert (
        body["status"] == "failed"
        and body["error"]["code"].startswith("GR-START")
        and "acme_math" in body["error"]["message"]
    )
    assert code == 3 and "error[GR-START" in err


def test_config_paths_the_manifest_does_not_list_give_failed(tmp_path: Path) -> None:
    pkg, _ = gated_env(tmp_path / "pkg")
    _, r, (code, _) = _hold_failed(tmp_path, pkg, {"config_paths": ["/elsewhere/evil.yaml"]})
    assert (
        r.json()["error"]["code"] == "GR-HOST-CONFIG-PATHS" and "/elsewhere/evil.yaml" in r.json()["error"]["message"]
    )
    assert code == 1


@pytest.mark.parametrize(
    "text,says",
    [
        ("policy_base_url: [http://a", "is not valid YAML at line 1"),
        ("[1, 2]", "must be a mapping"),
        ("", "is set but empty"),
    ],
)
def test_an_unreadable_global_config_is_one_clear_error(tmp_path: Path, text: str, says: str) -> None:
    pkg, _ = gated_env(tmp_path / "pkg")
    proc = up_process(pkg, tmp_path, "--host-mode", "nmp", env=host_env(tmp_path, text))
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        kill_tree(proc)
    assert proc.returncode == 1 and out == ""
    assert err.startswith("error[GR-HOST-CONFIG]: NMP_GYM_GLOBAL_CONFIG ") and says in err
    assert "Traceback" not in err and err.count("error[") == 1


def test_a_server_failing_for_good_after_ready_gives_failed(tmp_path: Path) -> None:
    pkg, gates = gated_env(tmp_path / "pkg")
    (gates / "start").touch()
    proc = up_process(
        pkg,
        tmp_path,
        "--host-mode",
        "nmp",
        "--head-port",
        "0",
        "--max-restarts",
        "0",
        env=host_env(tmp_path, {"policy_model_name": "acme-policy"}),
    )
    try:
        url = first_line(proc)["head_server"]
        info = first_line(proc)
        assert info["status"] == "ready"
        rows = httpx.get(url + "/server_instances", timeout=10, trust_env=False).json()
        os.kill(next(r["pid"] for r in rows if r["process_name"] == "acme_math"), signal.SIGKILL)
        r = health_until(url, "failed")
        assert r.status_code == 503 and r.json()["status"] == "failed"
        assert r.json()["error"]["code"].startswith("GR-START") and "acme_math" in r.json()["error"]["message"]
        assert first_line(proc)["status"] == "failed"
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 3
    finally:
        kill_tree(proc)
