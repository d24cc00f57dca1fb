"""The job's policy values at ``up``: a keyless endpoint gets the key ``EMPTY``; the model name is
checked against the endpoint's ``/models`` list (real stub model on loopback as the endpoint)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemon.conftest import running_stub
from tests.helpers.daemon import kill_tree, read_ready_line, up_process, write_fixture_package

POLICY_MODEL = {
    "policy_model": {
        "responses_api_models": {
            "acme_model": {
                "base_url": "${policy_base_url}",
                "api_key": "${policy_api_key}",
                "model": "${policy_model_name}",
            }
        }
    }
}


def policy_package(root: Path) -> Path:
    """A policy_model instance using the three job values (as examples/native-quickstart does) and a
    resources server."""
    return write_fixture_package(
        root, {**POLICY_MODEL, "acme_math": {"resources_servers": {"acme_math": {"domain": "math"}}}}
    )


def test_base_url_without_key_uses_empty(tmp_path: Path, stub_endpoint) -> None:
    url, served = stub_endpoint
    pkg = policy_package(tmp_path / "pkg")
    proc = up_process(
        pkg, tmp_path, "--policy-base-url", url, "--policy-model-name", served, env={"GYM_RUNTIME_POLICY_API_KEY": ""}
    )
    try:
        info = json.loads(read_ready_line(proc))
        assert info["status"] == "ready" and info["policy_model"]["stub"] is False
        seen = json.loads((tmp_path / "run/servers/policy_model/contract.json").read_text())
        assert seen["cfg"]["api_key"] == "EMPTY" and seen["cfg"]["model"] == served
    finally:
        kill_tree(proc)
        err = proc.stderr.read()
    assert "no policy API key given" in err and "'EMPTY'" in err


def test_policy_values_given_as_overrides_count_as_the_flags(tmp_path: Path, stub_endpoint) -> None:
    """Bug: `up PKG policy_base_url=URL` (Gym's own way of passing it) started the built-in stub model,
    whose values were merged over the override, and a keyless endpoint then missed its `EMPTY` key."""
    url, served = stub_endpoint
    proc = up_process(
        policy_package(tmp_path / "pkg"),
        tmp_path,
        f"policy_base_url={url}",
        f"policy_model_name={served}",
        env={"GYM_RUNTIME_POLICY_API_KEY": ""},
    )
    try:
        info = json.loads(read_ready_line(proc))
        assert info["status"] == "ready" and info["policy_model"]["stub"] is False
        seen = json.loads((tmp_path / "run/servers/policy_model/contract.json").read_text())
        assert seen["cfg"]["base_url"] == url and seen["cfg"]["api_key"] == "EMPTY" and seen["cfg"]["model"] == served
    finally:
        kill_tree(proc)
        err = proc.stderr.read()
    assert "starting the built-in stub model" not in err and "'EMPTY'" in err


def test_key_from_the_environment_is_kept_and_never_printed(tmp_path: Path, stub_endpoint) -> None:
    url, served = stub_endpoint
    proc = up_process(
        policy_package(tmp_path / "pkg"),
        tmp_path,
        "--policy-base-url",
        url,
        "--policy-model-name",
        served,
        env={"GYM_RUNTIME_POLICY_API_KEY": "sk-real-key-42"},
    )
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
    r = subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "config", str(pkg)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 1 and "GR-CONFIG-MISSING" in r.stderr
    for key in ("policy_base_url", "policy_api_key", "policy_model_name"):
        assert key in r.stderr
    assert "EMPTY" not in r.stderr


def test_model_name_not_served_fails_the_start(tmp_path: Path, stub_endpoint) -> None:
    url, served = stub_endpoint
    proc = up_process(
        policy_package(tmp_path / "pkg"), tmp_path, "--policy-base-url", url, "--policy-model-name", "acme-policy-70b"
    )
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        kill_tree(proc)
    assert proc.returncode == 3 and out == ""
    assert "GR-START-MODEL-NAME" in err and url in err
    assert "'acme-policy-70b'" in err and f"'{served}'" in err and "--policy-model-name" in err


@pytest.mark.parametrize("deadline", [("--model-endpoint-timeout", "1"), ("--startup-timeout", "20")])
def test_an_unreachable_endpoint_is_waited_for_then_named_with_its_last_probe(
    tmp_path: Path, deadline: tuple[str, str]
) -> None:
    """The policy endpoint refusing connections, every server ready: past the endpoint's own
    deadline, or past the overall start-up deadline when that is shorter (both 600 s by default),
    the block names the endpoint and what its last probe saw, not a timeout with no server listed."""
    proc = up_process(
        policy_package(tmp_path / "pkg"),
        tmp_path,
        "--policy-base-url",
        "http://127.0.0.1:9/v1",
        "--policy-model-name",
        "m",
        *deadline,
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    assert proc.returncode == 3, err[-2000:]
    assert "error[GR-START-MODEL-ENDPOINT]: model endpoint http://127.0.0.1:9/v1 never answered" in err, err[-2000:]
    assert "last probe: GET http://127.0.0.1:9/v1/models: connection refused" in err
    assert "GR-START-TIMEOUT" not in err and "GR-START-MODEL-NAME" not in err and "Traceback" not in err


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
    with running_stub("m", "--api-key", "sk-right") as url:
        proc = up_process(
            policy_package(tmp_path / "pkg"),
            tmp_path,
            "--policy-base-url",
            url,
            "--policy-model-name",
            "m",
            env={"GYM_RUNTIME_POLICY_API_KEY": "sk-wrong-key"},
        )
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            kill_tree(proc)
    assert proc.returncode == 3 and out == ""
    assert "GR-START-MODEL-AUTH" in err and "HTTP 401" in err and "--policy-api-key-env" in err
    assert "sk-wrong-key" not in err


def test_suggested_root() -> None:
    from gym_runtime.policy.endpoint import suggest_root

    assert suggest_root("http://127.0.0.1:8000") == "http://127.0.0.1:8000/v1"
    assert suggest_root("http://127.0.0.1:8000/") == "http://127.0.0.1:8000/v1"
    assert suggest_root("http://h:8000/v1/chat/completions") == "http://h:8000/v1"
    assert suggest_root("http://h:8000/chat/completions") == "http://h:8000/v1"
    assert suggest_root("http://h:8000/v1/completions/") == "http://h:8000/v1"
    assert suggest_root("https://h/openai/responses") == "https://h/openai/v1"
    assert suggest_root("http://[::1]:8000/v1/models") == "http://[::1]:8000/v1"


def test_what_the_endpoint_is_whatever_its_path(stub_endpoint) -> None:
    """tests/cases/data/C35/README.md: ``/models`` is probed whatever the suffix; a base that is
    not the OpenAI root is named with the root to use; the model name is checked on every root."""
    import asyncio

    import httpx

    from gym_runtime.policy.endpoint import check

    url, served = stub_endpoint
    root = url.removesuffix("/v1")

    async def outcomes() -> list:
        async with httpx.AsyncClient(trust_env=False) as client:
            return [
                await check(client, u, m)
                for u, m in [
                    (url, (served, None)),
                    (url + "/", (served, None)),
                    (url, ("other", None)),
                    (root, (served, None)),
                    (url + "/chat/completions", (served, None)),
                    (root + "/completions", None),
                    (url, None),
                ]
            ]

    ok, slash, wrong, bare, chat, completions, unnamed = asyncio.run(outcomes())
    assert ok == slash == unnamed == "ready"
    assert wrong == ("wrong-model", "other", [served])
    assert bare == (
        "not-root",
        url,
        f"GET {root}/models answered HTTP 404, not a model list; GET {url}/models lists '{served}'",
    )
    assert chat == (
        "not-root",
        url,
        f"it ends in the endpoint path /chat/completions; GET {url}/models lists '{served}'",
    )
    assert completions[:2] == ("not-root", url)


@pytest.mark.parametrize("suffix", ["", "/v1/chat/completions"])
def test_a_base_url_that_is_not_the_api_root_fails_before_ready(tmp_path: Path, stub_endpoint, suffix: str) -> None:
    """tests/cases/data/C35/README.md (fixture package; the case's own package runs in
    tests/cases/test_c35_policy_url.py): no ready line, exit 3, "did you mean .../v1?"."""
    url, served = stub_endpoint
    given = url.removesuffix("/v1") + suffix
    proc = up_process(
        policy_package(tmp_path / "pkg"), tmp_path, "--policy-base-url", given, "--policy-model-name", served
    )
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        kill_tree(proc)
    assert proc.returncode == 3 and out == ""
    assert "GR-START-MODEL-URL" in err and f"did you mean {url}?" in err and f"--policy-base-url {url}" in err


def reasoning_package(root: Path, parser: bool) -> Path:
    policy = {
        "policy_model": {
            "responses_api_models": {
                "acme_model": {
                    **POLICY_MODEL["policy_model"]["responses_api_models"]["acme_model"],
                    "uses_reasoning_parser": parser,
                }
            }
        }
    }
    return write_fixture_package(
        root, {**policy, "acme_math": {"resources_servers": {"acme_math": {"domain": "math"}}}}
    )


@pytest.mark.parametrize(
    ("mode", "parser", "code", "said"),
    [
        ("reasoning=reasoning", False, 3, "GR-START-REASONING-PARSER"),
        ("reasoning=reasoning_content", False, 3, "GR-START-REASONING-PARSER"),
        ("reasoning=reasoning", True, 0, "reasoning fields ['reasoning']"),
        ("think=close", False, 0, "WARNING: policy endpoint"),
        ("p=1", False, 0, "reasoning fields none, <think> tags no; uses_reasoning_parser: false fits"),
    ],
)
def test_probe_policy_finds_the_reasoning_parser_mismatch_at_start(
    tmp_path: Path, mode: str, parser: bool, code: int, said: str
) -> None:
    """docs/rollouts.md, "Reasoning": with --probe-policy, an endpoint that sends reasoning fields to a
    policy_model with uses_reasoning_parser: false fails the start (every rollout would fail);
    think tags in the content are a warning."""
    with running_stub("m", "--mode", mode) as url:
        proc = up_process(
            reasoning_package(tmp_path / "pkg", parser),
            tmp_path,
            "--policy-base-url",
            url,
            "--policy-model-name",
            "m",
            "--probe-policy",
        )
        try:
            if code == 0:
                assert json.loads(read_ready_line(proc))["status"] == "ready"
                kill_tree(proc)
                err = proc.stderr.read()
            else:
                out, err = proc.communicate(timeout=60)
                assert proc.returncode == code and out == ""
        finally:
            kill_tree(proc)
    assert said in err
    if code:
        assert "set uses_reasoning_parser: true in the config of 'policy_model'" in err


def test_probe_policy_repairs_model_output_that_is_no_text(tmp_path: Path) -> None:
    """docs/rollouts.md, "Model output that is not text": a policy answering a lone surrogate (a
    split "\\ud83d" escape), NUL and control characters in its reasoning, content and tool call
    arguments. The probe sent turn 1 back in turn 2 and died with a raw UnicodeEncodeError
    traceback (exit 1); now the daemon is ready and the probe line says what it replaced."""
    from tests.helpers.fake_policy import start_fake

    with start_fake(tmp_path, "not_text", "m") as fake:
        proc = up_process(
            reasoning_package(tmp_path / "pkg", True),
            tmp_path,
            "--policy-base-url",
            fake.url + "/v1",
            "--policy-model-name",
            "m",
            "--probe-policy",
        )
        try:
            assert json.loads(read_ready_line(proc))["status"] == "ready"
        finally:
            kill_tree(proc)
        err = proc.stderr.read()
    assert "Traceback" not in err and "turn 2 with reasoning_field: both ok" in err
    assert "plain turn: 8 code point(s) that are no text replaced by U+FFFD" in err  # 4 in content, 4 in reasoning


def test_the_stub_models_port_is_held_from_the_moment_it_is_named(tmp_path: Path) -> None:
    """Bug: the stub model's port was chosen free and let go, then bound by the stub only once the
    venvs were built; another process took it in between (seen under parallel test runs) and the
    stub exited twice with "address already in use", failing the start. Now the daemon binds it
    when it names it and the stub serves on that socket."""
    import re
    import selectors
    import socket

    proc = up_process(policy_package(tmp_path / "pkg"), tmp_path)
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stderr, selectors.EVENT_READ)
        port = None
        while port is None and sel.select(120):
            line = proc.stderr.readline()
            assert line, "up exited before naming the stub model"
            if m := re.search(r"starting the built-in stub model at http://127\.0\.0\.1:(\d+)/v1", line):
                port = int(m.group(1))
        assert port is not None, "no line named the stub model"
        with socket.socket() as s, pytest.raises(OSError) as taken:
            s.bind(("127.0.0.1", port))
        assert taken.value.errno == errno.EADDRINUSE
        info = json.loads(read_ready_line(proc))
        assert info["status"] == "ready" and info["policy_model"]["stub"] is True
        assert info["policy_model"]["base_url"] == f"http://127.0.0.1:{port}/v1"
    finally:
        kill_tree(proc)
