"""Fuzz targets for model output that is no text, at every hop it crosses (``fuzz_targets.TARGETS``).

One chain of real processes on loopback per target: the fake policy (``not_text``, its strings set
per input with ``POST /fake/text``) -> the built-in ``vllm_model`` (reasoning parser on) -> the
built-in ``simple_agent`` (tools on the test resources server ``reward_echo``, reward 1.0) -> the
built-in relay ``legacy_agent``; the policy probe and the head server app run in-process. An input
is the four strings the policy answers with: ``content``, ``reasoning``, a tool call's ``name`` and
its raw ``arguments`` text, drawn with lone surrogates, NUL and control characters in them.

* ``text_probe``: the start-up probe (plain turn, tool turn, turn 2) passes, or fails with one of
  our ``GR-START-*`` errors; no other exception;
* ``text_model``: ``POST /v1/responses`` answers 200 with strict JSON that UTF-8 encodes strictly,
  and ``repaired_text`` counts exactly the code points that were no text;
* ``text_agent`` / ``text_relay``: ``POST /run`` (at the agent, through the relay) answers 200, the
  reward 1.0 (the answer was right), strict JSON, strict UTF-8, ``repaired_text`` at least the
  model server's count;
* ``text_head``: ``POST /rollouts/run`` with two rows through the relay: both rows scored 1.0, none
  lost, the same checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from hypothesis import strategies as st

from servers._kit.text import NOT_TEXT
from tests.helpers.fuzz_targets import Target, _timed

TOOL = {
    "type": "function",
    "name": "get_code",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}
ROW = {
    "responses_create_params": {
        "input": [{"role": "user", "content": "What is the code for 'alpha'?"}],
        "tools": [TOOL],
    }
}
SPECIAL = [
    "\ud83d",
    "\ude00",
    "\ud83d\ude00",
    "\udfff\ud800",
    "\x00",
    "\x07",
    "\x1b[31m",
    "\x7f",
    "\x85",
    "\u2028",
    "\ufeff",
    "\ufffd",
    "\\ud83d",
    "\\u0000",
    '"',
    "\\",
    "\n",
    "\r\n",
    "\t",
]
nasty = st.lists(
    st.one_of(
        st.sampled_from(SPECIAL),
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
        st.characters(max_codepoint=0x1F),
        st.characters(),
    ),
    max_size=12,
).map("".join)
arguments = st.one_of(
    nasty.map(lambda s: json.dumps({"key": s})), nasty.map(lambda s: json.dumps({"key": s}, ensure_ascii=False)), nasty
)
name = st.one_of(st.just("get_code"), nasty, st.just("get_code").map(lambda n: n + "\ud83d"))
text_case = st.fixed_dictionaries({"content": nasty, "reasoning": nasty, "name": name, "arguments": arguments})


def on_the_wire(text: str) -> int:
    """No-text code points in ``text`` once it went through a JSON escape and back (an escaped
    surrogate pair becomes one character again)."""
    return len(NOT_TEXT.findall(json.loads(json.dumps(text))))


def strict(r: httpx.Response) -> Any:
    """The body as strict JSON whose every string encodes as UTF-8 (AssertionError otherwise)."""

    def bad(token: str) -> Any:
        raise AssertionError(f"not strict JSON: {token}")

    body = json.loads(r.content, parse_constant=bad)
    json.dumps(body, ensure_ascii=False).encode("utf-8")  # UnicodeEncodeError: a lone surrogate passed through
    return body


@contextlib.contextmanager
def _chain(tmp: Path) -> Iterator[dict[str, Any]]:
    from tests.helpers.fake_policy import start_fake
    from tests.helpers.gym_servers import GymConfig, start_server

    echo = Path(__file__).resolve().parents[1] / "servers" / "apps" / "reward_echo"
    with contextlib.ExitStack() as stack:
        fake = stack.enter_context(start_fake(tmp, "not_text", "stub-model"))
        cfg = GymConfig()
        cfg.add(
            "policy_model",
            "responses_api_models",
            "vllm_model",
            base_url=fake.url + "/v1",
            api_key="EMPTY",
            model="stub-model",
            uses_reasoning_parser=True,
            return_token_id_information=False,
        )
        cfg.add("echo", "resources_servers", "reward_echo", domain="other")
        cfg.add(
            "agent",
            "responses_api_agents",
            "simple_agent",
            max_steps=3,
            resources_server={"type": "resources_servers", "name": "echo"},
            model_server={"type": "responses_api_models", "name": "policy_model"},
        )
        cfg.add(
            "relay",
            "environment_servers",
            "legacy_agent",
            agent_server={"type": "responses_api_agents", "name": "agent"},
        )
        urls = {
            n: stack.enter_context(start_server(cfg, n, tmp, server_dir=echo if n == "echo" else None)).url
            for n in cfg.instances
        }
        http = stack.enter_context(httpx.Client(trust_env=False, timeout=30))  # keep-alive: an input is a few ms
        yield {**urls, "fake": fake.url, "http": http}


def _set(urls: dict[str, Any], case: dict) -> None:
    r = urls["http"].post(
        urls["fake"] + "/fake/text", content=json.dumps(case).encode(), headers={"content-type": "application/json"}
    )
    assert r.status_code == 200, r.text


def _expected(case: dict) -> int:
    """What the model server replaces in the policy's first answer (a tool call with reasoning)."""
    return sum(on_the_wire(case[k]) for k in ("reasoning", "name", "arguments"))


@contextlib.contextmanager
def _probe_context(tmp: Path) -> Iterator[Callable[[Any], str]]:
    from gym_runtime.errors import StartError
    from gym_runtime.policy.probe import Inconclusive, Plan, Probe

    loop = asyncio.new_event_loop()
    client = httpx.AsyncClient(trust_env=False)
    with _chain(tmp) as urls:
        plan = Plan(
            "policy_model",
            urls["fake"] + "/v1",
            "stub-model",
            None,
            tools=True,
            token_ids=False,
            two_turns=True,
            parser=True,
            reasoning_field="both",
        )

        def check(case: dict) -> str:
            _set(urls, case)
            said: list[str] = []
            try:
                loop.run_until_complete(Probe(client, plan, said.append).run())
                label = "probe ok"
            except StartError as e:
                label = f"probe {e.code}"
            except Inconclusive:
                label = "probe inconclusive"
            for line in said:
                line.encode("utf-8")
            return label

        try:
            yield _timed(check)
        finally:
            loop.run_until_complete(client.aclose())
            loop.close()


@contextlib.contextmanager
def _http_context(tmp: Path, hop: str) -> Iterator[Callable[[Any], str]]:
    with _chain(tmp) as urls:

        def check(case: dict) -> str:
            _set(urls, case)
            want = _expected(case)
            if hop == "model":
                r = urls["http"].post(urls["policy_model"] + "/v1/responses", json=ROW["responses_create_params"])
                assert r.status_code == 200, (r.status_code, r.text[:500])
                assert strict(r).get("repaired_text", 0) == want, (r.text[:500], want)
                return "HTTP 200" + (" repaired" if want else "")
            r = urls["http"].post(urls["agent" if hop == "agent" else "relay"] + "/run", json=ROW)
            assert r.status_code == 200, (r.status_code, r.text[:500])
            body = strict(r)
            assert body["reward"] == 1.0 and body["repaired_text"] >= want, (body, want)
            return "HTTP 200 reward 1.0" + (" repaired" if body["repaired_text"] else "")

        yield _timed(check)


@contextlib.contextmanager
def _head_context(tmp: Path) -> Iterator[Callable[[Any], str]]:
    from gym_runtime.head.app import HeadBackend, create_app

    with _chain(tmp) as urls:
        backend = HeadBackend(
            config_yaml=lambda: "a: 1\n",
            instances=list,
            health=lambda: (200, {"status": "ready"}),
            logs=lambda name, n: None,
            agents=lambda: {"agent": urls["relay"]},
            heartbeat_s=0.05,
        )
        loop = asyncio.new_event_loop()
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(backend)), base_url="http://head", timeout=30
        )
        row = {**ROW, "agent_ref": {"type": "responses_api_agents", "name": "agent"}}

        def check(case: dict) -> str:
            _set(urls, case)
            want = _expected(case)
            r = loop.run_until_complete(client.post("/rollouts/run", json={"examples": [row, row]}))
            assert r.status_code == 200, (r.status_code, r.text[:500])
            results = strict(r)["results"]
            assert len(results) == 2, results
            for result in results:
                assert result.get("error") is None and result["reward"] == 1.0, result
                assert result["repaired_text"] >= want, (result, want)
            return "HTTP 200 2 rows scored" + (" repaired" if want else "")

        try:
            yield _timed(check)
        finally:
            loop.run_until_complete(client.aclose())
            loop.close()


TEXT_TARGETS = {
    "text_probe": Target("text_probe", text_case, _probe_context),
    "text_model": Target("text_model", text_case, lambda tmp: _http_context(tmp, "model")),
    "text_agent": Target("text_agent", text_case, lambda tmp: _http_context(tmp, "agent")),
    "text_relay": Target("text_relay", text_case, lambda tmp: _http_context(tmp, "relay")),
    "text_head": Target("text_head", text_case, _head_context),
}
