"""Fuzz targets: what each input goes through and which outcomes are allowed (tests/reliability/test_fuzz.py,
bench/fuzz.py, hypothesis).

Every target is a hypothesis strategy and a ``check(case) -> label`` run inside a context that
holds what the target needs (a temporary directory, a head server app with a loopback agent, an
egress proxy on a loopback listener). ``check`` returns a label for the counts (an exit code, an
error code, an HTTP status) and raises ``AssertionError`` for what must never happen: a traceback,
an exception that is not one of ours, an HTTP 500, a body that is not JSON, a hang.

* ``manifests``, ``configs``: packages of :mod:`tests.helpers.fuzz_packages` through ``validate``
  and ``config`` in-process: exit 0 or 1, no traceback;
* ``rows``: JSONL bytes through :func:`gym_runtime.rollouts.rows.load_rows`: rows or a
  ``DatasetError``;
* ``head``: request bodies to the head server app (``POST /rollouts/run``, ``GET
  /servers/{name}/logs``) whose rows reach a real loopback agent that answers what the row asks
  (any status, any bytes: an untrusted agent); 200 with strict JSON and one result per row, or
  400/404/422 with our error envelope, never 500;
* ``proxy``: raw bytes on a connection to the egress proxy (internet on, an operator list, a
  resolver that knows no name, a dialer that reaches only a loopback echo peer): an HTTP answer
  (200 only for the peer, else 400/403/502) and a closed connection within 10 s, and no exception
  in the proxy's loop;
* ``text_probe``, ``text_model``, ``text_agent``, ``text_relay``, ``text_head``: model output that is
  no text (lone surrogates, NUL, control characters) at every hop it crosses
  (:mod:`tests.helpers.fuzz_text`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

from tests.helpers.fuzz_packages import package, run_cli, tree, write_package

SLOW_S = 10.0  # one input taking longer than this is a hang


@dataclass(frozen=True)
class Target:
    """``strategy`` draws a case; ``context(tmp)`` yields ``check(case) -> label``."""

    name: str
    strategy: st.SearchStrategy
    context: Callable[[Path], contextlib.AbstractContextManager[Callable[[Any], str]]]


def _timed(check: Callable[[Any], str]) -> Callable[[Any], str]:
    def run(case: Any) -> str:
        t0 = time.monotonic()
        label = check(case)
        assert time.monotonic() - t0 < SLOW_S, f"took {time.monotonic() - t0:.1f}s"
        return label

    return run


# ------------------------------------------------------------------ manifests and configs
@contextlib.contextmanager
def _cli_context(tmp: Path, command: str) -> Iterator[Callable[[Any], str]]:
    def check(case: dict) -> str:
        root = tmp / "pkg"
        shutil.rmtree(root, ignore_errors=True)
        write_package(root, case)
        flags = [x for f in case["flags"] for x in f]
        js = ["--json"] if case["json"] else []
        if command == "validate":
            argv = ["validate", *js, str(root), *flags]
        else:
            argv = [
                "config",
                *js,
                str(root),
                *case["overrides"],
                *(x for x in flags if x not in ("--platform", "linux/arm64")),
            ]
        code, text = run_cli(argv)
        assert code in (0, 1), (argv, code, text[-2000:])
        assert "Traceback" not in text, text[-3000:]
        return f"exit {code}"

    yield _timed(check)


# ------------------------------------------------------------------ dataset rows
ROW_FIELDS = [
    "responses_create_params",
    "agent_ref",
    "task_idx",
    "question",
    "answer",
    "task",
    "example_id",
    "info",
    "vf_env_id",
    "extra",
]
good_row = st.fixed_dictionaries(
    {
        "responses_create_params": st.fixed_dictionaries(
            {"input": st.one_of(st.text(max_size=20), st.just([{"role": "user", "content": "hi"}]))}
        ),
        "agent_ref": st.fixed_dictionaries(
            {"type": st.just("responses_api_agents"), "name": st.sampled_from(["acme_agent", "vf_agent", "ghost"])}
        ),
    },
    optional=dict.fromkeys(ROW_FIELDS[2:], tree),
)
row_line = st.one_of(
    good_row.map(lambda r: json.dumps(r)),
    st.dictionaries(st.sampled_from(ROW_FIELDS), tree, max_size=5).map(lambda r: json.dumps(r)),
    tree.map(lambda t: json.dumps(t)),
    st.sampled_from(
        [
            "{",
            "[" * 100_000,
            '{"a": ' * 50_000,
            "1" * 5000,
            "NaN",
            "-Infinity",
            '{"x": 1e999}',
            '"\u2028"',
            "\ufeff{}",
            "{}\r",
            "\x00",
            "",
            "   ",
            '{"agent_ref": {"name": "acme_agent"}}',
            '{"responses_create_params": {"input": []}, "agent_ref": "acme_agent"}',
            '{"task_idx": 1' + "0" * 400 + "}",
            '{"a": "\\ud800"}',
        ]
    ),
    st.text(max_size=40),
)
rows_file = st.one_of(
    st.lists(row_line, max_size=6).map(lambda lines: "\n".join(lines).encode("utf-8", "surrogatepass")),
    st.lists(row_line, max_size=4).map(lambda lines: "\r\n".join(lines).encode("utf-8", "surrogatepass")),
    st.binary(max_size=200),
)


@dataclass
class _Spec:
    implementation: str
    config: dict


@contextlib.contextmanager
def _rows_context(tmp: Path) -> Iterator[Callable[[Any], str]]:
    from gym_runtime.errors import DatasetError
    from gym_runtime.rollouts.rows import load_rows

    agents = {"acme_agent": _Spec("simple_agent", {}), "vf_agent": _Spec("verifiers_agent", {"vf_env_id": "vf-x"})}
    path = tmp / "rows.jsonl"

    def check(data: bytes) -> str:
        path.write_bytes(data)
        try:
            load_rows(path, agents, notes=[])
            return "rows read"
        except DatasetError as e:  # labelled by its first problem
            return e.violations[0].code if e.violations else e.code

    yield _timed(check)


# ------------------------------------------------------------------ head server request bodies
class _Agent(BaseHTTPRequestHandler):
    """A loopback agent answering ``/run`` with the row's ``fuzz_status`` and ``fuzz_body``."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            row = json.loads(raw)
        except ValueError:
            row = {}
        status = row.get("fuzz_status", 200) if isinstance(row, dict) else 200
        status = status if isinstance(status, int) and 200 <= status <= 599 else 200
        body = row.get("fuzz_body", '{"reward": 1.0}') if isinstance(row, dict) else "{}"
        data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a: object) -> None:
        pass


agent_body = st.one_of(
    st.just('{"reward": 1.0}'),
    tree.map(json.dumps),
    st.text(max_size=30),
    st.sampled_from(
        [
            '{"reward": NaN}',
            '{"reward": 1e999}',
            '{"reward": "1"}',
            "[1, 2]",
            "null",
            '{"reward": 0.5, "m": NaN}',
            '{"error": {"type": "bad_reward"}}',
            '{"error": {"type": "model_unavailable", "message": 7}}',
            "\x00\xff",
            "[" * 5000,
            '{"reward": 1' + "0" * 5000 + "}",
        ]
    ),
)
head_row = st.fixed_dictionaries(
    {
        "agent_ref": st.one_of(
            st.fixed_dictionaries(
                {"type": st.just("responses_api_agents"), "name": st.sampled_from(["echo", "ghost"])}
            ),
            tree,
        )
    },
    optional={
        "fuzz_status": st.one_of(st.sampled_from([200, 400, 404, 422, 500, 502, 503]), tree),
        "fuzz_body": agent_body,
        "responses_create_params": tree,
    },
)
head_body = st.one_of(
    st.fixed_dictionaries(
        {"examples": st.lists(head_row, max_size=5)}, optional={"concurrency": st.one_of(st.integers(-2, 2000), tree)}
    ).map(json.dumps),
    st.fixed_dictionaries({"examples": st.one_of(tree, st.lists(tree, max_size=3))}).map(json.dumps),
    tree.map(json.dumps),
    st.binary(max_size=100),
    st.sampled_from(
        [
            "",
            "{",
            '{"examples": [' * 3000,
            '{"examples": [], "concurrency": 1e999}',
            '{"examples": [{"agent_ref": {"name": "echo"}, "x": NaN}]}',
        ]
    ),
)
head_case = st.one_of(
    st.tuples(st.just("POST /rollouts/run"), head_body),
    st.tuples(st.just("GET logs"), st.tuples(st.text(max_size=12), st.one_of(st.integers(), st.text(max_size=5)))),
)


def _strict_json(text: str) -> Any:
    def bad(token: str) -> Any:
        raise AssertionError(f"not strict JSON: {token}")

    return json.loads(text, parse_constant=bad)


class _AgentServer(ThreadingHTTPServer):
    """The fuzzed head's agent. Its handler threads are joined at ``server_close`` (a row the head
    cancelled may still be answering when the case ends), and a client that hung up is no error:
    otherwise its traceback lands, on a loaded host, in a later test's captured stderr."""

    daemon_threads = False
    block_on_close = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def _head_context(tmp: Path) -> Iterator[Callable[[Any], str]]:
    import httpx

    from gym_runtime.head.app import HeadBackend, create_app

    agent = _AgentServer(("127.0.0.1", 0), _Agent)
    threading.Thread(target=agent.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{agent.server_address[1]}"
    log = tmp / "echo.log"
    log.write_text("a line\n")
    backend = HeadBackend(
        config_yaml=lambda: "a: 1\n",
        instances=list,
        health=lambda: (200, {"status": "ready"}),
        logs=lambda name, n: (
            {"name": name, "log_file": str(log), "lines": ["a line"][-n:] if n else []} if name == "echo" else None
        ),
        agents=lambda: {"echo": url},
        heartbeat_s=0.05,
    )
    app = create_app(backend)
    loop = asyncio.new_event_loop()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://head", timeout=SLOW_S)

    def check(case: tuple) -> str:
        kind, data = case
        if kind == "GET logs":
            name, tail = data
            r = loop.run_until_complete(client.get(f"/servers/{quote(name, safe='')}/logs", params={"tail": tail}))
            assert r.status_code in (200, 404, 422), (r.status_code, r.text[:500])
            _strict_json(r.text)
            return f"logs HTTP {r.status_code}"
        body = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
        r = loop.run_until_complete(
            client.post("/rollouts/run", content=body, headers={"content-type": "application/json"})
        )
        assert r.status_code in (200, 400), (r.status_code, r.text[:500])
        answer = _strict_json(r.text)
        if r.status_code == 400:
            assert answer["error"]["code"] == "GR-ROLLOUT-BAD-REQUEST", answer
            return "HTTP 400 GR-ROLLOUT-BAD-REQUEST"
        rows = json.loads(body)["examples"]
        assert len(answer["results"]) == len(rows) == len(answer["latency_s"]), answer
        codes = sorted(
            {
                r["error"]["code"] if isinstance(r.get("error"), dict) and "code" in r["error"] else "result"
                for r in answer["results"]
            }
        )
        for result in answer["results"]:
            assert isinstance(result, dict), result
        assert not {"GR-ROLLOUT-DEADLINE", "GR-INTERNAL"} & set(codes), answer  # the deadline is an hour
        return "HTTP 200 " + ",".join(codes or ["no rows"])

    try:
        yield _timed(check)
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()
        agent.shutdown()
        agent.server_close()


# ------------------------------------------------------------------ egress proxy raw bytes
HOSTS = [
    "api.example.invalid",
    "exfil.invalid",
    "x.example.com",
    "127.0.0.1",
    "localhost",
    "[::1]",
    "2130706433",
    "0x7f.1",
    "169.254.169.254",
    "[fe80::1]",
    "a..b.com",
    "bad_host!.com",
    "[::1",
    "",
    "é.invalid",
    "x" * 300,
]
PORTS = ["80", "443", "0", "65535", "65536", "99999", "-1", "abc", "", "8o", "١٢٣"]
request_line = st.builds(
    lambda method, host, port, version, tail: (
        f"{method} {host}{':' + port if port is not None else ''}"
        f"{'' if method == 'CONNECT' else '/'} {version}\r\n{tail}"
    ),
    st.sampled_from(["CONNECT", "GET", "POST", "get", "", "CONNECT CONNECT"]),
    st.one_of(st.sampled_from(HOSTS), st.sampled_from(HOSTS).map(lambda h: "http://" + h), st.text(max_size=10)),
    st.one_of(st.none(), st.sampled_from(PORTS), st.just("ECHO")),
    st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/9", ""]),
    st.sampled_from(
        [
            "\r\n",
            "Host: evil.invalid\r\n\r\n",
            "Proxy-Authorization: x\r\n\r\nbody",
            "",
            "\n\n",
            "X: " + "y" * 70_000 + "\r\n\r\n",
        ]
    ),
)
proxy_bytes = st.one_of(
    request_line.map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.binary(max_size=300),
    st.sampled_from([b"\r\n\r\n", b"CONNECT \r\n\r\n", b"\xff\xfe\r\n\r\n", b"GET  HTTP/1.1\r\n\r\n"]),
)


@contextlib.contextmanager
def _proxy_context(tmp: Path) -> Iterator[Callable[[Any], str]]:
    from sandbox.policy import EgressPolicy
    from sandbox.proxy import EgressProxy, host_dial
    from tests.helpers.egress_targets import RecordingResolver

    echo = socket.create_server(("127.0.0.1", 0))
    echo_port = echo.getsockname()[1]
    errors: list[str] = []
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda lp, ctx: errors.append(str(ctx.get("exception") or ctx.get("message"))))
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def serve_echo() -> None:
        while True:
            try:
                conn, _ = echo.accept()
            except OSError:
                return
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\necho peer\n")
            conn.close()

    threading.Thread(target=serve_echo, daemon=True).start()

    async def only_the_echo_peer(ip: str, port: int) -> socket.socket:
        if (ip, port) != ("127.0.0.1", echo_port):
            raise ConnectionRefusedError(f"the fuzz dialer reaches only the echo peer, not {ip}:{port}")
        return await host_dial(ip, port)

    quiet = logging.getLogger("sandbox.egress")  # a denial per input would flood the output
    was = quiet.level
    quiet.setLevel(logging.ERROR)
    policy = EgressPolicy.from_environ(
        {"NMP_RL_SANDBOX_ALLOW_INTERNET": "true", "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW": "api.example.invalid"}
    )
    proxy = EgressProxy(policy, lambda event: None, RecordingResolver({}), only_the_echo_peer)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    server = asyncio.run_coroutine_threadsafe(proxy.serve(listener, "fuzz"), loop).result(10)
    address = listener.getsockname()

    def check(data: bytes) -> str:
        errors.clear()
        data = data.replace(b"ECHO", str(echo_port).encode())
        with socket.create_connection(address, timeout=SLOW_S) as c:
            try:
                c.sendall(data)
                c.shutdown(socket.SHUT_WR)
            except OSError:  # the proxy may close early on a bad request (our side then sees a reset)
                pass
            got = b""
            try:
                while chunk := c.recv(65536):
                    got += chunk
            except ConnectionResetError:
                pass
        time.sleep(0.005)  # the proxy's handler ends right after closing: let it report what it raised
        assert not errors, errors
        if not got:
            return "closed"
        assert got.startswith(b"HTTP/1.1 "), got[:200]
        status = got[9:12].decode()
        assert status in ("200", "400", "403", "502"), got[:200]
        if status == "200":  # only the one peer the dialer reaches may answer
            assert b"echo peer" in got, got[:200]
        return f"HTTP {status}"

    try:
        yield _timed(check)
    finally:
        quiet.setLevel(was)
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        echo.close()


TARGETS = {
    "manifests": Target("manifests", package(), lambda tmp: _cli_context(tmp, "validate")),
    "configs": Target("configs", package(valid_manifest=True), lambda tmp: _cli_context(tmp, "config")),
    "rows": Target("rows", rows_file, _rows_context),
    "head": Target("head", head_case, _head_context),
    "proxy": Target("proxy", proxy_bytes, _proxy_context),
}
from tests.helpers.fuzz_text import TEXT_TARGETS  # noqa: E402 - its targets use Target and _timed above

TARGETS.update(TEXT_TARGETS)


def run_target(target: Target, examples: int, seed: int | None = None) -> dict[str, int]:
    """Run ``examples`` generated inputs through ``target``; the count of each outcome label.
    A forbidden outcome fails with hypothesis's (shrunk) falsifying example."""
    from collections import Counter

    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    counts: Counter[str] = Counter()
    tmp = Path(tempfile.mkdtemp(prefix=f"gr-fuzz-{target.name}-"))
    try:
        with target.context(tmp) as check:

            @settings(
                max_examples=examples,
                deadline=None,
                database=None,
                phases=[Phase.generate, Phase.shrink],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=target.strategy)
            def run(case: Any) -> None:
                counts[check(case)] += 1

            (hseed(seed)(run) if seed is not None else run)()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dict(counts)
