"""The job's policy values at ``up``: a keyless endpoint gets the key ``EMPTY``; the model name is
checked against the endpoint's ``/models`` list (real stub model on loopback as the endpoint)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.daemon import kill_tree, read_ready_line, up_process, write_fixture_package

POLICY_MODEL = {"policy_model": {"responses_api_models": {"acme_model": {
    "base_url": "${policy_base_url}", "api_key": "${policy_api_key}", "model": "${policy_model_name}"}}}}


def policy_package(root: Path) -> Path:
    """A policy_model instance using the three job values (as examples/native-quickstart does) and a
    resources server."""
    return write_fixture_package(root, {**POLICY_MODEL, "acme_math": {"resources_servers": {"acme_math": {
        "domain": "math"}}}})


def test_base_url_without_key_uses_empty(tmp_path: Path, stub_endpoint) -> None:
    url, served = stub_endpoint
    pkg = policy_package(tmp_path / "pkg")
    proc = up_process(pkg, tmp_path, "--policy-base-url", url, "--policy-model-name", served,
                      env={"GYM_RUNTIME_POLICY_API_KEY": ""})
    try:
        info = json.loads(read_ready_line(proc))
        assert info["status"] == "ready" and info["policy_model"]["stub"] is False
        seen = json.loads((tmp_path / "run/servers/policy_model/contract.json").read_text())
        assert seen["cfg"]["api_key"] == "EMPTY" and seen["cfg"]["model"] == served
    finally:
        kill_tree(proc)
        err = proc.stderr.read()
    assert "no policy API key given" in err and "'EMPTY'" in err


def test_key_from_the_environment_is_kept_and_never_printed(tmp_path: Path, stub_endpoint) -> None:
    url, served = stub_endpoint
    proc = up_process(policy_package(tmp_path / "pkg"), tmp_path, "--policy-base-url", url,
                      "--policy-model-name", served, env={"GYM_RUNTIME_POLICY_API_KEY": "sk-real-key-42"})
    try:
        read_ready_line(proc)
        seen = json.loads((tmp_path / "run/servers/policy_model/contract.json").read_text())
        assert seen["cfg"]["api_key"] == "sk-real-key-42"
    finally:
        kill_tree(proc)
        err = proc.stderr.read()
    assert "sk-real-key-42" not in err and "EMPTY" not in err


def test_config_without_policy_values_still_fails_like_c02(tmp_path: Path) -> None:
    pkg = policy_package(tmp_path / "pkg")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_RUNTIME_POLICY_")}
    r = subprocess.run([sys.executable, "-m", "gym_runtime.cli.main", "config", str(pkg)], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 1 and "GR-CONFIG-MISSING" in r.stderr
    for key in ("policy_base_url", "policy_api_key", "policy_model_name"):
        assert key in r.stderr
    assert "EMPTY" not in r.stderr


def test_model_name_not_served_fails_the_start(tmp_path: Path, stub_endpoint) -> None:
    url, served = stub_endpoint
    proc = up_process(policy_package(tmp_path / "pkg"), tmp_path, "--policy-base-url", url,
                      "--policy-model-name", "acme-policy-70b")
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        kill_tree(proc)
    assert proc.returncode == 3 and out == ""
    assert "GR-START-MODEL-NAME" in err and url in err
    assert "'acme-policy-70b'" in err and f"'{served}'" in err and "--policy-model-name" in err


def test_unreachable_endpoint_keeps_waiting_and_times_out(tmp_path: Path) -> None:
    proc = up_process(policy_package(tmp_path / "pkg"), tmp_path, "--policy-base-url", "http://127.0.0.1:9/v1",
                      "--policy-model-name", "m", "--model-endpoint-timeout", "1")
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        kill_tree(proc)
    assert proc.returncode == 3 and "GR-START-MODEL-ENDPOINT" in err and "GR-START-MODEL-NAME" not in err


def test_stub_serves_the_model_name_given(tmp_path: Path) -> None:
    """No policy URL but a model name: the built-in stub serves that name, so the check passes."""
    proc = up_process(policy_package(tmp_path / "pkg"), tmp_path, "--policy-model-name", "acme-policy-70b")
    try:
        info = json.loads(read_ready_line(proc))
        assert info["policy_model"]["stub"] is True
    finally:
        kill_tree(proc)


def test_refused_api_key_fails_the_start(tmp_path: Path) -> None:
    """Bug: a key the endpoint refuses (401 on /models) passed start-up; `up` said ready and every
    rollout then failed with a nested 502."""
    import socket
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    stub = subprocess.Popen([sys.executable, "-m", "gym_runtime.stub_model", "--port", str(port), "--model", "m",
                             "--api-key", "sk-right"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url + "/models", timeout=1, trust_env=False)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        proc = up_process(policy_package(tmp_path / "pkg"), tmp_path, "--policy-base-url", url,
                          "--policy-model-name", "m", env={"GYM_RUNTIME_POLICY_API_KEY": "sk-wrong-key"})
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            kill_tree(proc)
    finally:
        kill_tree(stub)
    assert proc.returncode == 3 and out == ""
    assert "GR-START-MODEL-AUTH" in err and "HTTP 401" in err and "--policy-api-key-env" in err
    assert "sk-wrong-key" not in err


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_endpoint_wait_is_reported_with_its_own_phase(tmp_path: Path) -> None:
    """Servers ready, endpoint refused: a progress line names the URL and the probe result, /health
    says the phase, and the final error carries the last probe result as its cause."""
    import httpx

    url = f"http://127.0.0.1:{_free_port()}/v1"
    proc = up_process(policy_package(tmp_path / "pkg"), tmp_path, "--policy-base-url", url,
                      "--policy-model-name", "m", "--model-endpoint-timeout", "8")
    seen, head, health = [], None, None
    try:
        for line in proc.stderr:
            seen.append(line)
            if "head server at " in line:
                head = line.split("head server at ", 1)[1].split(";", 1)[0]
            if "waiting for the policy model endpoint(s)" in line:
                health = httpx.get(head + "/health", trust_env=False, timeout=5).json()
                break
        out, err = proc.communicate(timeout=60)
    finally:
        kill_tree(proc)
    err = "".join(seen) + err
    assert health is not None, err
    assert health["phase"] == "waiting for the policy model endpoint(s)" and "not_ready" not in health
    assert f"GET {url}/models: connection refused" in seen[-1]
    assert proc.returncode == 3 and "GR-START-MODEL-ENDPOINT" in err
    assert "(phase: waiting for the policy model endpoint(s)" in err
    assert f"cause: last probe: GET {url}/models: connection refused" in err


def test_endpoint_wait_report_repeats_with_the_last_probe_result() -> None:
    """The report repeats every ``every_s`` while the endpoint stays refused, and stops when the
    start-up no longer waits for it (real probes on loopback)."""
    import asyncio

    import httpx

    from gym_runtime.supervise.readiness import report_endpoint_wait

    url = f"http://127.0.0.1:{_free_port()}/v1"
    lines, last, pending = [], {}, [url]

    async def main() -> None:
        async with httpx.AsyncClient(trust_env=False) as client:
            task = asyncio.create_task(report_endpoint_wait(client, lambda: list(pending), lines.append, last,
                                                            every_s=0.5))
            await asyncio.sleep(2.6)
            pending.clear()
            count = len(lines)
            await asyncio.sleep(1.2)
            assert len(lines) == count  # nothing more once nothing is waited for
            task.cancel()

    asyncio.run(main())
    assert len(lines) >= 2 and all(f"GET {url}/models: connection refused" in x for x in lines)
    assert last == {url: "connection refused"}
