"""The egress matrix: internet off / on / on + operator list, at full and partial isolation
(and the cooperative-only level none), with httpx, requests, urllib, a raw socket and uv, all
inside a real sandbox. Every test name resolves to a loopback stand-in through the injected
resolver; the test process refuses any real DNS lookup."""

from __future__ import annotations

import asyncio

import pytest

from sandbox import EgressPolicy, IsolationLevel, Sandbox
from tests.helpers.egress_targets import RecordingResolver, plain_server
from tests.sandbox._run import guard_dns, run_json

HOSTS = [
    "allowed.example.com",
    "www.example.org",
    "api.example.net",
    "x.hf.co",
    "hf.co",
    "evil.example.net",
    "meta.example.com",
]
POLICIES = {
    "internet-off": ({}, set()),
    "internet-on": ({"NMP_RL_SANDBOX_ALLOW_INTERNET": "true"}, {"allowed.example.com", "www.example.org"}),
    "operator-list": (
        {"NMP_RL_SANDBOX_ALLOW_INTERNET": "yes", "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW": "api.example.net, *.hf.co"},
        {"allowed.example.com", "www.example.org", "api.example.net", "x.hf.co"},
    ),
}


async def _matrix(tmp_path, standins, python, environ, level, monkeypatch):
    dns_seen = guard_dns(monkeypatch)
    model_ip, model_name = plain_server("127.0.0.1"), plain_server("127.0.0.1")
    ip_url = f"http://127.0.0.1:{model_ip.server_address[1]}/v1"
    name_url = f"http://model.example.invalid:{model_name.server_address[1]}/v1"
    table = dict.fromkeys(HOSTS + ["pkgs.example.com", "pkgs.example.net"], standins.addr)
    table["meta.example.com"] = "169.254.169.254"  # rebinding: allowed by *.com, must never be dialled
    table["model.example.invalid"] = "127.0.0.1"
    resolver = RecordingResolver(table)
    policy = EgressPolicy.from_environ(environ, [ip_url, name_url]).with_trusted_addresses([standins.addr])
    sb = await Sandbox.start(policy, tmp_path / "sb", level=level, resolver=resolver)
    try:
        peer_port = sb.allocate_port()
        urls = [f"{s}://{h}/" for h in HOSTS for s in ("http", "https")] + [ip_url, name_url]
        spec = {
            "urls": urls,
            "raw": [[standins.addr, 80]],
            "isolation_checks": level != IsolationLevel.NONE,
            "dns_name": "allowed.example.com",
            "uv": {
                "bin": str(__import__("uv").find_uv_bin()),
                "package": "tinypkg",
                "target": str(tmp_path / "sb" / "w" / "uvt"),
                "index_ok": "http://pkgs.example.com/simple/",
                "index_denied": "http://pkgs.example.net/simple/",
            },
        }
        uv_dir = __import__("pathlib").Path(spec["uv"]["bin"]).parent
        out = await run_json(
            sb,
            python,
            "egress_client.py",
            spec,
            tmp_path / "sb" / "w",
            extra_ro=[uv_dir, standins.ca.parent],
            env={"TEST_CA": str(standins.ca), "SSL_CERT_FILE": str(standins.ca)},
        )
        return sb, out, resolver, dns_seen, peer_port
    finally:
        await sb.close()
        model_ip.shutdown()
        model_name.shutdown()


def _check(out, allowed, sb, resolver, dns_seen, enforced):
    assert not dns_seen, f"real DNS lookups happened: {dns_seen}"
    for h in HOSTS:
        for scheme in ("http", "https"):
            for client, got in out["http"][f"{scheme}://{h}/"].items():
                want = f"ok:hello {h}" if h in allowed else "denied"
                assert got == want, (client, scheme, h, got)
    for url, row in out["http"].items():
        if "model.example.invalid" in url or "127.0.0.1" in url:
            assert set(row.values()) == {"ok:hello " + url.split("/")[2]}, row  # endpoints at their original URLs
    denied_hosts = {d["host"] for d in sb.denials}
    assert denied_hosts >= set(HOSTS) - allowed, sb.denials
    assert all(d["server"] == "client" and d["rule"] for d in sb.denials)
    assert set(resolver.calls) <= allowed | {"meta.example.com", "pkgs.example.com", "model.example.invalid"}
    if "allowed.example.com" in allowed:
        meta = [d for d in sb.denials if d["host"] == "meta.example.com"]
        assert meta and all(d["rule"].startswith("resolved-special:169.254.169.254") for d in meta)
        assert out["uv"]["allowed"]["rc"] == 0, out["uv"]["allowed"]
    else:
        assert out["uv"]["allowed"]["rc"] != 0
    assert out["uv"]["denied"]["rc"] != 0
    assert any(d["host"] == "pkgs.example.net" for d in sb.denials), "uv's denied index must show as a denial"
    raw = out["raw"][next(iter(out["raw"]))]
    if enforced:
        assert raw.startswith("Connection refused"), raw  # a client ignoring proxies reaches nothing
    else:
        assert raw == "connected"  # level none: cooperative only (the documented warning)


@pytest.mark.slow
@pytest.mark.parametrize("level", [IsolationLevel.FULL, IsolationLevel.PARTIAL])
@pytest.mark.parametrize("policy_name", list(POLICIES))
def test_matrix_enforced(tmp_path, standins, client_python, full_available, monkeypatch, level, policy_name):
    if not full_available:
        pytest.skip("full isolation is not available on this host")
    environ, allowed = POLICIES[policy_name]
    sb, out, resolver, dns_seen, _ = asyncio.run(
        _matrix(tmp_path, standins, client_python, environ, level, monkeypatch)
    )
    assert sb.level == level
    assert {"httpx", "requests", "urllib"} <= set(out["clients"]) or out["clients"] == ["urllib"]
    _check(out, allowed, sb, resolver, dns_seen, enforced=True)
    assert out["ifaces"] == ["lo"] and out["routes"] == 0
    assert out["raw"]["192.0.2.1:80"].startswith("Network is unreachable")
    if "allowed.example.com" in allowed:  # a name lookup of an allowed host is answered (case C47, dns.py)
        assert out["dns"] == "resolved", out["dns"]
    else:
        assert out["dns"].startswith("failed") and out["dns_ms"] < 500


@pytest.mark.slow
def test_matrix_level_none_is_cooperative_and_warns(tmp_path, standins, client_python, monkeypatch):
    environ, allowed = POLICIES["operator-list"]
    sb, out, resolver, dns_seen, _ = asyncio.run(
        _matrix(tmp_path, standins, client_python, environ, IsolationLevel.NONE, monkeypatch)
    )
    assert sb.level == IsolationLevel.NONE
    assert sb.report.warning.startswith("EGRESS NOT ENFORCED")
    _check(out, allowed, sb, resolver, dns_seen, enforced=False)
