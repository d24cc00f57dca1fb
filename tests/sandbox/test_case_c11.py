"""Case C11 (cases/C11): a direct-URL / git requirement reaches for the network during an online
install. Behind the egress allowlist the blocked connection must show up as a policy denial
naming the host and the server, not only as uv's generic network error."""

from __future__ import annotations

import asyncio

import pytest
import uv
import yaml

from sandbox import EgressPolicy, ProcessSpec, Sandbox
from tests.helpers.cases import case_dir, case_package
from tests.helpers.egress_targets import RecordingResolver
from tests.sandbox._run import guard_dns


def test_c11_blocked_fetch_is_a_denial_naming_host_and_server(tmp_path, plain_python, monkeypatch, full_available):
    if not full_available:
        pytest.skip("full isolation is not available on this host")
    dns_seen = guard_dns(monkeypatch)
    case = case_dir("C11")
    allow = yaml.safe_load((case / "nemo-environment.yaml").read_text())["sandbox"]["egress_allowlist"]
    pkg = case_package("C11", tmp_path / "pkg")
    server_dir = pkg.root / "resources_servers" / "acme_web"
    reqs = (case / "resources_servers" / "acme_web" / "requirements.txt").read_text()
    hosts = {line.split("://", 1)[1].split("/", 1)[0] for line in reqs.splitlines() if "://" in line}
    environ = {"NMP_RL_SANDBOX_ALLOW_INTERNET": "true", "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW": ",".join(allow)}
    policy = EgressPolicy.from_environ(environ)
    resolver = RecordingResolver({})
    uvb = uv.find_uv_bin()

    async def main():
        sb = await Sandbox.start(policy, tmp_path / "sb", resolver=resolver)
        work = tmp_path / "sb" / "w"
        work.mkdir(parents=True)
        err = work / "uv.err"
        try:
            with open(err, "wb") as fe:
                p = sb.spawn(
                    ProcessSpec(
                        "acme_web",
                        [
                            uvb,
                            "pip",
                            "install",
                            "--no-cache",
                            "--python",
                            str(plain_python),
                            "--target",
                            str(work / "t"),
                            "--no-index",
                            "--find-links",
                            str(pkg.root / "wheels"),
                            "-r",
                            str(server_dir / "requirements.txt"),
                        ],
                        server_dir,
                        {"PATH": "/usr/bin:/bin", "HOME": str(work), "UV_HTTP_RETRIES": "0"},
                        read_only_paths=[pkg.root, plain_python.parent.parent, uv.find_uv_bin().rsplit("/", 1)[0]],
                        writable_paths=[work],
                        stderr_fd=fe.fileno(),
                    )
                )
            rc = await asyncio.wait_for(p.wait(), 120)
            return sb, rc, err.read_text()
        finally:
            await sb.close()

    sb, rc, stderr = asyncio.run(main())
    assert rc != 0, stderr
    denied = {d["host"] for d in sb.denials}
    assert denied and denied <= hosts, (sb.denials, stderr)
    assert all(d["server"] == "acme_web" and d["rule"] == "no-match" for d in sb.denials)
    assert resolver.calls == [] and dns_seen == []  # denied before any lookup
