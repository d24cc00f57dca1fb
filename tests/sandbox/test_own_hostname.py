"""Case C58 at the sandbox's level: a server resolves its own host name, and a lookup or connection
that fails is said to be a failure, not a policy denial.

Software that looks up its own name at start-up (Erlang's EPMD, a JVM's
``InetAddress.getLocalHost()``, a scheduler binding ``gethostbyname(gethostname())``) used to die in
the sandbox: bubblewrap's UTS namespace kept the host's name, which neither the sandbox's
``/etc/hosts`` nor its DNS stub resolved, and the stub logged the lookup as an egress denial to a
made-up port 443. Now the sandbox has a name of its own, mapped to its loopback
(``sandbox/launch.py``); the DNS stub answers it too, logs a denied lookup without a port, and
logs a name that has no address as what it is (``sandbox/dns.py``)."""

from __future__ import annotations

import asyncio
import json
import os
import socket

import dns.message
import dns.rcode
import pytest

from sandbox import EgressPolicy, ProcessSpec, Sandbox, probe_isolation
from sandbox.dns import NameForwards
from sandbox.launch import SANDBOX_HOSTNAME
from tests.helpers.cases import CASES

OWN = """
import json, socket
name = socket.gethostname()
addr = socket.gethostbyname(name)
pool = socket.socket(); pool.bind((addr, 0)); pool.listen()
print(json.dumps({"name": name, "addr": addr, "fqdn": socket.getfqdn()}))
"""


def _own_name(tmp_path, plain_python) -> dict:
    """What a server inside a fresh sandbox sees of its own name (``OWN``'s JSON)."""

    async def main() -> dict:
        sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / "sb")
        try:
            r, w = os.pipe()
            proc = sb.spawn(
                ProcessSpec(
                    "kernel_env",
                    [str(plain_python), "-c", OWN],
                    tmp_path,
                    {"PATH": "/usr/bin"},
                    read_only_paths=[plain_python.parent.parent],
                    stdout_fd=w,
                )
            )
            os.close(w)
            assert await proc.wait() == 0
            with os.fdopen(r) as f:
                out = json.loads(f.read())
            assert sb.denials == []  # nothing was asked of the network
            return out
        finally:
            await sb.close()

    return asyncio.run(main())


def test_case_c58_a_server_resolves_its_own_host_name_and_binds_there(tmp_path, plain_python):
    """tests/cases/data/C58/README.md ("Expected"): the name the server sees resolves to loopback."""
    assert "gethostbyname(gethostname())" in (CASES / "C58" / "README.md").read_text()
    if probe_isolation().level.value != "full":
        pytest.skip("needs full isolation (bubblewrap's own UTS namespace)")
    out = _own_name(tmp_path, plain_python)
    assert out["name"] == SANDBOX_HOSTNAME == "gym-sandbox" and out["addr"] == "127.0.0.1"


def test_where_naming_the_sandbox_is_refused_it_keeps_the_hosts_name_which_resolves(
    tmp_path, plain_python, monkeypatch
):
    """podman's default seccomp profile refuses ``sethostname`` in bubblewrap's UTS namespace
    ("Can't set hostname to gym-sandbox"); the probe then records ``hostname: None`` and keeps
    the level (a name is no isolation), and the sandbox maps the host's own name to loopback."""
    report = probe_isolation()
    if report.level.value == "none" or not report.details.get("bwrap"):
        pytest.skip("needs bubblewrap")
    monkeypatch.setitem(report.details, "hostname", None)  # what the probe records where sethostname is refused
    out = _own_name(tmp_path, plain_python)
    assert out["name"] == socket.gethostname() != SANDBOX_HOSTNAME and out["addr"] == "127.0.0.1"


def _ask(forwards: NameForwards, name: str) -> dns.message.Message:
    query = dns.message.make_query(name, "A")
    return dns.message.from_wire(asyncio.run(forwards._reply(query.to_wire(), "kernel_env")))


def _forwards(environ: dict[str, str], answers: dict[str, list[str]]) -> tuple[NameForwards, list[dict]]:
    denials: list[dict] = []
    policy = EgressPolicy.from_environ(environ)
    return NameForwards(policy, denials.append, lambda ip, port: None, lambda host: answers.get(host, [])), denials


def test_the_dns_stub_answers_the_sandboxs_own_names_without_a_denial():
    forwards, denials = _forwards({}, {})
    for name in (SANDBOX_HOSTNAME, "localhost"):
        reply = _ask(forwards, name)
        assert reply.rcode() == dns.rcode.NOERROR and [r.to_text() for r in reply.answer[0]] == ["127.0.0.1"]
    assert denials == []


def test_a_denied_lookup_is_a_denial_without_a_port(caplog):
    """C58's log said ``port=443`` for a lookup, which has no port."""
    forwards, denials = _forwards({}, {})
    assert _ask(forwards, "vm").rcode() == dns.rcode.NXDOMAIN
    assert denials == [{"server": "kernel_env", "host": "vm", "port": None, "rule": "internet-off", "via": "dns"}]
    said = [r.getMessage() for r in caplog.records if "egress DENY" in r.getMessage()]
    assert said and "port=" not in said[0] and "a DNS lookup" in said[0]


def test_an_allowed_name_without_an_address_is_a_failure_not_a_denial(caplog):
    forwards, denials = _forwards(
        {"NMP_RL_SANDBOX_ALLOW_INTERNET": "true", "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW": "gone.example.net"}, {}
    )
    assert _ask(forwards, "gone.example.net").rcode() == dns.rcode.NXDOMAIN
    assert denials == []
    assert any(
        "egress DNS FAILED server=kernel_env host=gone.example.net" in r.getMessage()
        and "not a policy denial" in r.getMessage()
        for r in caplog.records
    )


def test_an_allowed_name_resolving_to_loopback_is_denied_by_its_range():
    """Following C58's old hint (allow the host's own name) met this rule: the name is refused
    because of the address it resolves to, which the start-up error now says (failure.py)."""
    forwards, denials = _forwards(
        {"NMP_RL_SANDBOX_ALLOW_INTERNET": "true", "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW": "vm"}, {"vm": ["127.0.0.1"]}
    )
    assert _ask(forwards, "vm").rcode() == dns.rcode.NXDOMAIN
    assert [(d["host"], d["port"], d["rule"]) for d in denials] == [
        ("vm", None, "resolved-special:127.0.0.1 (127.0.0.0/8)")
    ]


def test_a_connection_that_fails_is_a_failure_not_a_denial(caplog):
    """The proxy's answer to a connection that fails (a peer port with nothing listening) is a 502
    saying so, logged ``egress FAILED``; no denial is counted."""
    from sandbox.proxy import EgressProxy

    denials: list[dict] = []

    async def main() -> bytes:
        proxy = EgressProxy(EgressPolicy.from_environ({}), denials.append)
        server = await proxy.serve(_listener(), "kernel_env")
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        server.close()
        return answer

    answer = asyncio.run(main())
    assert answer.startswith(b"HTTP/1.1 502") and b"X-Sandbox-Error: upstream-error" in answer
    assert b"egress failed, not denied: 127.0.0.1:1" in answer and b"X-Sandbox-Deny" not in answer
    assert denials == []
    assert any("egress FAILED server=kernel_env host=127.0.0.1 port=1" in r.getMessage() for r in caplog.records)
    assert not any("egress DENY" in r.getMessage() for r in caplog.records)


def _listener():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.setblocking(False)
    return s
