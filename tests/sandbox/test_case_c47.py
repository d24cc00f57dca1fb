"""Case C47: a client that ignores HTTPS_PROXY (NeMo Gym's aiohttp sessions have no ``trust_env``)
resolves an allowlisted host itself. In a sandbox network that used to fail as "Temporary failure
in name resolution" with no egress line. Now the sandbox's DNS answers an allowed name with an
address whose forward reaches the real host, and a denied name is ``NXDOMAIN``, logged and counted
with the server (or task sandbox) and the host (``sandbox/dns.py``); the start-up hint names the
pattern to allow for a redirect host (``*.hf.co``).

The case's inputs are built here: the allowlist ``www.sec.gov`` (on a stand-in port, so no root is
needed), a resolver that answers that name with a loopback stand-in of the real site, and a client
that bypasses every proxy (urllib with an empty ``ProxyHandler``: the way aiohttp without
``trust_env`` behaves)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.server
import textwrap
import threading

import pytest

from sandbox import EgressPolicy, ProcessSpec, Sandbox, probe_isolation
from sandbox.boxroot import BoxRoot
from sandbox.policy import suggest_allow
from sandbox.taskbox import BoxLimits, TaskBox, box_support

SPAWNER = concurrent.futures.ThreadPoolExecutor(1)
CLIENT = textwrap.dedent("""
    import sys, urllib.request, urllib.error
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # ignores HTTP(S)_PROXY
    for url in sys.argv[1:]:
        try:
            print(url, "->", opener.open(url, timeout=10).read().decode().strip())
        except urllib.error.URLError as e:
            print(url, "-> error:", e.reason)
""")


@pytest.fixture()
def site():
    """A stand-in of www.sec.gov on the host's loopback: (port, resolver answering that name)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"filings for {self.headers['Host']}\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1], (lambda host: ["127.0.0.1"] if host in ("www.sec.gov", "data.sec.gov") else [])
    srv.shutdown()


def _policy(port: int) -> EgressPolicy:
    return EgressPolicy.from_environ(
        {"NMP_RL_SANDBOX_ALLOW_INTERNET": "true", "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW": f"www.sec.gov:{port}"}
    ).with_trusted_addresses(["127.0.0.1"])


def test_case_c47_a_server_that_ignores_proxies(site, tmp_path, plain_python):
    if probe_isolation().level.value == "none":
        pytest.skip("no sandbox network on this host")
    port, resolver = site

    async def main():
        sb = await Sandbox.start(_policy(port), tmp_path / "sb", resolver=resolver)
        try:
            out = tmp_path / "out.txt"
            with open(out, "wb") as f:
                p = sb.spawn(
                    ProcessSpec(
                        "finance_sec_search",
                        [
                            str(plain_python),
                            "-c",
                            CLIENT,
                            f"http://www.sec.gov:{port}/",
                            f"http://evil.example.net:{port}/",
                        ],
                        tmp_path,
                        {"PATH": "/usr/bin:/bin"},
                        read_only_paths=[plain_python.parent.parent],
                        stdout_fd=f.fileno(),
                        stderr_fd=f.fileno(),
                    )
                )
            await asyncio.wait_for(p.wait(), 60)
            return out.read_text(), list(sb.denials)
        finally:
            await sb.close()

    text, denials = asyncio.run(main())
    assert f"http://www.sec.gov:{port}/ -> filings for www.sec.gov:{port}" in text, text
    assert "evil.example.net" in text and "error" in text.split("evil.example.net", 1)[1]
    (d,) = [d for d in denials if d["host"] == "evil.example.net"]
    assert d["server"] == "finance_sec_search" and d["via"] == "dns" and d["rule"] == "no-match"


def test_case_c47_a_task_sandbox_that_ignores_proxies(site, tmp_path):
    support = box_support(probe_isolation())
    if isinstance(support, str):
        pytest.skip(support)
    port, resolver = site
    denials: list[dict] = []

    async def main():
        box = await TaskBox.start(
            "finance_sec_search/gr-1",
            BoxRoot.host(),
            tmp_path / "box",
            BoxLimits(),
            _policy(port),
            SPAWNER,
            *support,
            on_deny=denials.append,
            resolver=resolver,
        )
        try:
            r = await box.exec(
                [
                    "/usr/bin/python3",
                    "-c",
                    CLIENT,
                    f"http://www.sec.gov:{port}/x",
                    f"http://data.sec.gov:{port}/",
                    f"http://www.sec.gov:{port + 1}/",
                ],
                timeout_s=60,
            )
            return r.stdout.decode(), box.denial_count
        finally:
            await box.close()

    text, count = asyncio.run(main())
    assert f"www.sec.gov:{port}/x -> filings for www.sec.gov:{port}" in text, text
    assert f"data.sec.gov:{port}/ -> error" in text  # not on the allowlist: refused at the lookup
    assert f"www.sec.gov:{port + 1}/ -> error" in text  # allowed name, port not forwarded
    assert count == 1 and denials[0]["server"] == "finance_sec_search/gr-1" and denials[0]["host"] == "data.sec.gov"


def test_case_c47_the_hint_names_the_pattern_of_a_redirect_host():
    assert suggest_allow(["cdn-lfs.hf.co:443", "huggingface.co:443"]) == (
        "cdn-lfs.hf.co,huggingface.co",
        "*.hf.co,huggingface.co",
    )
    assert suggest_allow(["www.sec.gov:443", "data.sec.gov:443"]) == ("www.sec.gov,data.sec.gov", "*.sec.gov")
    assert suggest_allow(["huggingface.co:443"]) == ("huggingface.co", "")
