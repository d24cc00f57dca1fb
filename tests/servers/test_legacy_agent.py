"""The built-in relay ``environment_servers/legacy_agent`` (NeMo Gym 0.7.0's contract: ``/run`` and
``/aggregate_metrics`` relayed to one agent unread), as a real process in front of a test agent
that echoes what reached it (``apps/echo_agent``) and in front of the real chain's simple_agent."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.helpers.gym_servers import GymConfig, free_port, start_server
from tests.servers.conftest import lookup_row

ECHO_DIR = Path(__file__).parent / "apps" / "echo_agent"
AGENT = {"type": "responses_api_agents", "name": "echo"}


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("relay")
    cfg = GymConfig()
    cfg.add("echo", "responses_api_agents", "echo_agent")
    cfg.add("echo_env", "environment_servers", "legacy_agent", agent_server=AGENT)
    cfg.add(
        "typeless_env",
        "environment_servers",
        "legacy_agent",
        agent_server={"name": "echo"},
        max_concurrent_episodes=4,
        queue_timeout_seconds=1.0,
        cleanup_timeout_seconds=180,
    )
    with (
        start_server(cfg, "echo", tmp, server_dir=ECHO_DIR),
        start_server(cfg, "echo_env", tmp) as env,
        start_server(cfg, "typeless_env", tmp) as typeless,
    ):
        yield env.url, typeless.url


def test_run_is_relayed_unread_both_ways(relay) -> None:
    body = b'{"responses_create_params": {"input": "hi"},   "x": [1,2]}'  # spacing kept: never re-encoded
    with httpx.Client(trust_env=False) as c:
        reply = c.post(
            relay[0] + "/run",
            content=body,
            headers={"content-type": "application/json", "x-trace": "t-1", "cookie": "sid=abc; other=2"},
        )
    assert reply.status_code == 200
    seen = reply.json()
    assert seen["path"] == "/run" and seen["body"] == body.decode()
    assert seen["headers"]["x-trace"] == "t-1" and seen["cookies"] == {"sid": "abc", "other": "2"}
    assert reply.headers["x-echo"] == "yes"
    assert sorted(reply.headers.get_list("set-cookie")) == [
        "first=1; Path=/; SameSite=lax",
        "second=2; Path=/; SameSite=lax",
    ]
    assert not any("gym_session" in c for c in reply.headers.get_list("set-cookie"))  # the relay sets none


def test_status_and_non_json_bodies_pass_through(relay) -> None:
    reply = httpx.post(
        relay[0] + "/run", json={}, headers={"x-echo-status": "418", "x-echo-raw": "not json"}, trust_env=False
    )
    assert (reply.status_code, reply.text, reply.headers["content-type"]) == (
        418,
        "not json",
        "text/plain; charset=utf-8",
    )


def test_aggregate_metrics_reach_the_agent(relay) -> None:
    reply = httpx.post(relay[0] + "/aggregate_metrics", json=[{"reward": 1.0}], trust_env=False)
    assert reply.status_code == 200 and reply.json()["path"] == "/aggregate_metrics"
    assert json.loads(reply.json()["body"]) == [{"reward": 1.0}]


def test_an_agent_reference_without_its_type_and_gyms_limits_are_accepted(relay) -> None:
    reply = httpx.post(relay[1] + "/run", json={"a": 1}, trust_env=False)
    assert reply.status_code == 200 and json.loads(reply.json()["body"]) == {"a": 1}


def test_an_agent_that_is_not_listening_is_a_502_naming_it(tmp_path: Path) -> None:
    cfg = GymConfig()
    cfg.instances["gone"] = {
        "responses_api_agents": {"echo_agent": {"entrypoint": "app.py", "host": "127.0.0.1", "port": free_port()}}
    }
    cfg.add("env", "environment_servers", "legacy_agent", agent_server={"name": "gone"}, connect_retry_seconds=0.5)
    with start_server(cfg, "env", tmp_path) as env:
        reply = httpx.post(env.url + "/run", json={}, trust_env=False, timeout=30)
    assert reply.status_code == 502
    assert reply.json()["error"]["upstream"] == "gone" and "unavailable" in reply.json()["error"]["message"]


def test_an_unknown_key_is_refused_at_start_as_gyms_relay_refuses_it(tmp_path: Path) -> None:
    cfg = GymConfig()
    cfg.add("echo", "responses_api_agents", "echo_agent")
    cfg.add("env", "environment_servers", "legacy_agent", agent_server=AGENT, max_steps=3)
    with start_server(cfg, "env", tmp_path, ready=False) as env:
        assert env.proc.wait(30) == 1
    assert "error: [env] invalid config for 'env' (environment_servers/legacy_agent): max_steps" in env.output()


def test_rows_through_the_relay_reach_the_real_agent_and_come_back_with_rewards(chain, tmp_path: Path) -> None:
    cfg = GymConfig(dict(chain.config.instances), dict(chain.config.extra))
    cfg.add(
        "lookup_env",
        "environment_servers",
        "legacy_agent",
        agent_server={"type": "responses_api_agents", "name": "lookup_agent"},
    )
    with start_server(cfg, "lookup_env", tmp_path) as env:
        rewards = []
        for _ in range(4):
            reply = httpx.post(env.url + "/run", json=lookup_row("kappa"), timeout=60, trust_env=False)
            assert reply.status_code == 200
            rewards.append(reply.json()["reward"])
            assert {"gym_session_policy_model", "gym_session_lookup"} <= set(reply.cookies)
    assert set(rewards) <= {0.0, 1.0}
