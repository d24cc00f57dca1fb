"""Full isolation: pid namespace, read-only venv and package, no capabilities, the exact
environment, peers over the sandbox loopback, published ports, the head server exposed inside,
graceful stop through the pidfd."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from sandbox import EgressPolicy, IsolationLevel, ProcessSpec, Sandbox
from tests.helpers.egress_targets import plain_server
from tests.sandbox._run import APPS, guard_dns, run_json


@pytest.fixture
def full(full_available):
    if not full_available:
        pytest.skip("full isolation is not available on this host")


async def _wait_http(host: str, port: int, timeout: float = 20.0) -> str:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return await asyncio.to_thread(
                lambda: urllib.request.urlopen(f"http://{host}:{port}/", timeout=2).read().decode()
            )
        except OSError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.05)


def test_full_isolation_inside_view(full, tmp_path, plain_python, monkeypatch):
    guard_dns(monkeypatch)
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "server.py").write_text("# a server file\n")
    venv = plain_python.parent.parent

    async def main():
        sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / "sb", require_full=True)
        try:
            head = plain_server("127.0.0.1")
            inside = await sb.expose_host_service(sb.allocate_port(), "127.0.0.1", head.server_address[1])
            peer_port = sb.allocate_port()
            peer = sb.spawn(
                ProcessSpec(
                    "peer",
                    [str(plain_python), str(APPS / "peer_server.py"), str(peer_port)],
                    package,
                    {"PATH": "/usr/bin"},
                    read_only_paths=[venv, package, APPS],
                )
            )
            host, hport = await sb.publish(peer_port)
            assert await _wait_http(host, hport) == f"peer {peer_port}"  # daemon reaches the server
            spec = {
                "write_probe": [str(venv), str(venv / "lib"), str(package), str(tmp_path / "sb" / "w"), "/tmp"],
                "exists_probe": [str(tmp_path / "elsewhere"), "/etc/shadow", str(Path.home() / ".ssh")],
                "fetch": [f"http://127.0.0.1:{peer_port}/", f"http://{inside[0]}:{inside[1]}/"],
            }
            (tmp_path / "elsewhere").mkdir()
            out = await run_json(
                sb,
                plain_python,
                "inspect_self.py",
                spec,
                tmp_path / "sb" / "w",
                env={"MY_VAR": "1"},
                extra_ro=[package],
            )
            info = await peer.stop(grace_s=5)
            head.shutdown()
            return sb, out, info, peer
        finally:
            await sb.close()

    sb, out, info, peer = asyncio.run(main())
    assert sb.level == IsolationLevel.FULL and sb.report.warning is None
    assert out["pid"] <= 3 and max(out["pids"]) <= 3 and os.getpid() not in out["pids"]  # own pid namespace
    assert out["cap_eff"] == "0000000000000000"
    w = out["writes"]
    assert w[str(plain_python.parent.parent)] == "Read-only file system"
    assert w[str(tmp_path / "pkg")] == "Read-only file system"
    assert w[str(tmp_path / "sb" / "w")] == "written" and w["/tmp"] == "written"
    ssh = str(Path.home() / ".ssh")
    assert out["visible"] == {str(tmp_path / "elsewhere"): False, "/etc/shadow": False, ssh: False}
    assert list(out["fetch"].values())[0].startswith("peer ")  # peers over the sandbox loopback
    assert list(out["fetch"].values())[1].startswith("hello ")  # the exposed head server
    env = out["env"]
    proxy = env["HTTP_PROXY"]
    assert proxy.startswith("http://127.0.0.1:") and all(
        env[k] == proxy for k in ("HTTPS_PROXY", "http_proxy", "https_proxy")
    )
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"
    extra = set(env) - {
        "PATH",
        "HOME",
        "MY_VAR",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
        "NO_PROXY",
        "no_proxy",
    }
    assert extra <= {"PWD", "LC_CTYPE"}, extra  # bwrap's --chdir sets PWD; Python's C-locale coercion LC_CTYPE
    assert info.reason == "terminated" and info.returncode == 0
    assert peer.pidfd is None and peer.poll() == 0


def test_require_full_refuses_lower_level(tmp_path):
    from gym_runtime.errors import IsolationError

    with pytest.raises(IsolationError) as e:
        asyncio.run(
            Sandbox.start(EgressPolicy.from_environ({}), tmp_path, require_full=True, level=IsolationLevel.PARTIAL)
        )
    assert e.value.code == "GR-SANDBOX-ISOLATION" and "full isolation required" in e.value.message and e.value.hint


ASK_TWICE = """
import json, threading
from sandbox.probe import probe_isolation
answers, both = [None, None], threading.Barrier(2)
def ask(i):
    both.wait()
    answers[i] = probe_isolation()
threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"one_probe": answers[0] is answers[1], "level": answers[0].level.value}))
"""


def test_two_threads_asking_at_once_share_one_isolation_probe() -> None:
    # the daemon starts the probe beside the config's merge, and its preflight asks again (bringup.py)
    r = subprocess.run([sys.executable, "-c", ASK_TWICE], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["one_probe"] is True and out["level"] in {level.value for level in IsolationLevel}
