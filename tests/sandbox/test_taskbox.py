"""Task sandboxes (boxes) as the daemon makes them: commands, files, timeouts, isolation, egress,
limits, and nothing left after a close or a daemon's SIGKILL (docs/architecture.md §6)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from sandbox import EgressPolicy, probe_isolation
from sandbox.boxroot import BoxRoot
from sandbox.limits import cgroup_mode
from sandbox.taskbox import BoxLimits, TaskBox, box_support
from tests.helpers.rootfs import mini_rootfs

HOST_PY = "/usr/bin/python3"
SPAWNER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="test-box-spawn")  # outlives every box


@pytest.fixture(scope="module")
def support():
    got = box_support(probe_isolation())
    if isinstance(got, str):
        pytest.skip(got)
    return got


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory) -> Path:
    return mini_rootfs(tmp_path_factory.mktemp("img") / "rootfs")


def run(coro):
    return asyncio.run(coro)


async def _box(
    support,
    base: Path,
    root: BoxRoot | None = None,
    limits: BoxLimits | None = None,
    policy: EgressPolicy | None = None,
    spawner=None,
    **kw,
) -> TaskBox:
    bwrap, proc = support
    return await TaskBox.start(
        "srv/box",
        root or BoxRoot.host(),
        base,
        limits or BoxLimits(),
        policy or EgressPolicy(),
        spawner or SPAWNER,
        bwrap,
        proc,
        **kw,
    )


def test_exec_output_exit_codes_and_timeouts(support, rootfs, tmp_path):
    async def main():
        for root in (BoxRoot.host(), BoxRoot("rootfs", rootfs, image="mini")):
            box = await _box(support, tmp_path / root.kind, root)
            try:
                r = await box.exec(["/bin/sh", "-c", "echo out; echo err >&2; exit 7"])
                assert (r.returncode, r.stdout, r.stderr, r.timed_out) == (7, b"out\n", b"err\n", False)
                r = await box.exec(["/bin/sh", "-c", "pwd; echo $FOO"], env={"FOO": "bar"}, cwd="/tmp")
                assert r.stdout == b"/tmp\nbar\n"
                t0 = time.monotonic()
                r = await box.exec(["/bin/sh", "-c", "sleep 30 & sleep 30"], timeout_s=0.5)
                assert r.timed_out and r.returncode == 137 and time.monotonic() - t0 < 5
                r = await box.exec(["/bin/sh", "-c", "kill -9 $$"])
                assert r.returncode == 137 and not r.timed_out
                r = await box.exec(["/no/such/program"])
                assert r.returncode is None and "No such file" in r.error
                r = await box.exec(["/bin/sh", "-c", "true"], cwd="/no/such/dir")
                assert r.returncode is None and "working directory /no/such/dir" in r.error
                assert (await box.exec(["/bin/sh", "-c", "id -u"])).stdout == b"0\n"
            finally:
                await box.close()

    run(main())


def test_files_in_and_out(support, rootfs, tmp_path):
    async def main():
        box = await _box(support, tmp_path / "box", BoxRoot("rootfs", rootfs), workdir="/job")
        try:
            src = tmp_path / "src.bin"
            src.write_bytes(bytes(range(256)) * 4096)
            await box.put(src, "a/b/data.bin")  # relative to the working directory
            r = await box.exec(["/bin/sh", "-c", "ls -l /job/a/b/data.bin"])
            assert r.returncode == 0 and b"1048576" in r.stdout
            back = tmp_path / "back.bin"
            await box.get("/job/a/b/data.bin", back)
            assert back.read_bytes() == src.read_bytes()
            with pytest.raises(Exception, match="No such file"):
                await box.get("/job/missing", tmp_path / "m")
            assert not (tmp_path / "m").exists()
            # a symlink in the box resolves inside the box, never to the host's file of that name
            await box.exec(["/bin/sh", "-c", "echo boxed > /tmp/f; rm -f /job/l; ln -s /tmp/f /job/l 2>/dev/null"])
        finally:
            await box.close()
        assert not (tmp_path / "box").exists()

    run(main())


def test_no_reach_to_host_loopback_other_boxes_or_host_files(support, tmp_path):
    host_srv = socket.create_server(("127.0.0.1", 0))
    port = host_srv.getsockname()[1]
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host only")
    probe = textwrap.dedent(f"""
        import os, socket, sys
        def reach(p):
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", p)); return "connected"
            except OSError as e:
                return type(e).__name__
        print(reach(int(sys.argv[1])))
        print(os.path.exists({str(secret)!r}), os.path.exists({str(Path.cwd())!r}), os.listdir("/root"))
        try:
            socket.create_connection(("1.1.1.1", 443), timeout=2); print("out")
        except OSError as e:
            print("no route:", e.errno)
    """)

    async def main():
        a = await _box(support, tmp_path / "a")
        b = await _box(support, tmp_path / "b")
        try:
            await a.exec(["/bin/sh", "-c", f"{HOST_PY} -m http.server 18123 >/dev/null 2>&1 &"])
            await asyncio.sleep(1.0)
            own = await a.exec([HOST_PY, "-c", probe, "18123"])
            assert own.stdout.splitlines()[0] == b"connected", own
            other = await b.exec([HOST_PY, "-c", probe, "18123"])
            lines = other.stdout.decode().splitlines()
            assert lines[0] == "ConnectionRefusedError", other
            host = await b.exec([HOST_PY, "-c", probe, str(port)])
            lines = host.stdout.decode().splitlines()
            assert lines[0] == "ConnectionRefusedError"
            assert lines[1] == "False False []", lines  # no host file, no checkout, an empty home
            assert lines[2].startswith("no route"), lines
        finally:
            await a.close()
            await b.close()
            host_srv.close()

    run(main())


def test_egress_goes_through_the_allowlisting_proxy(support, tmp_path):
    denials = []
    code = textwrap.dedent("""
        import urllib.request, urllib.error
        try:
            urllib.request.urlopen("https://blocked.example.net/", timeout=5)
        except urllib.error.URLError as e:
            print("refused", e.reason)
    """)

    async def main():
        box = await _box(support, tmp_path / "box", policy=EgressPolicy.from_environ({}), on_deny=denials.append)
        try:
            r = await box.exec([HOST_PY, "-c", code])
            assert b"refused" in r.stdout and b"403" in r.stdout, r
            assert box.denial_count == 1 and denials[0]["host"] == "blocked.example.net"
            assert denials[0]["server"] == "srv/box" and denials[0]["rule"] == "internet-off"
        finally:
            await box.close()

    run(main())


@pytest.mark.skipif(cgroup_mode() == "none", reason="no writable cgroup hierarchy here")
def test_memory_pids_and_cpu_limits(support, tmp_path):
    hog = "x = []\nwhile True:\n    x.append(bytearray(16 << 20))\n"

    async def main():
        box = await _box(support, tmp_path / "box", limits=BoxLimits(memory_mb=64, pids=12, cpus=0.5))
        try:
            assert set(box.enforced) == {"memory", "pids", "cpu"}
            r = await box.exec([HOST_PY, "-c", hog], timeout_s=30)
            assert r.returncode == 137 and not r.timed_out, r
            r = await box.exec(["/bin/sh", "-c", "for i in $(seq 40); do sleep 5 & done; wait"], timeout_s=30)
            assert b"fork" in r.stderr.lower() or b"resource" in r.stderr.lower(), r
            assert box.alive
        finally:
            await box.close()

    run(main())


def _box_processes(marker: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in (p.info["cmdline"] or [])):
            out.append(p)
    return out


def test_nothing_left_after_close_or_daemon_sigkill(support, tmp_path):
    async def main():
        box = await _box(support, tmp_path / "closed")
        await box.exec(["/bin/sh", "-c", "(sleep 300 &) ; setsid sleep 301 & echo started"])
        pids = [p.pid for p in box.processes()]
        assert len(pids) >= 4
        await box.close()
        assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]

    run(main())
    script = tmp_path / "daemon.py"
    script.write_text(
        textwrap.dedent(f"""
        import asyncio, concurrent.futures, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from pathlib import Path
        from sandbox import EgressPolicy
        from sandbox.boxroot import BoxRoot
        from sandbox.taskbox import BoxLimits, TaskBox
        SPAWNER = concurrent.futures.ThreadPoolExecutor(1)
        async def main():
            box = await TaskBox.start("srv/box", BoxRoot.host(), Path({str(tmp_path / "killed")!r}), BoxLimits(),
                                      EgressPolicy(), SPAWNER, {support[0]!r},
                                      {support[1]!r})
            await box.exec(["/bin/sh", "-c", "(sleep 300 &); setsid sleep 302 &"])
            print(" ".join(str(p.pid) for p in box.processes()), flush=True)
            await asyncio.sleep(600)
        asyncio.run(main())
    """)
    )
    daemon = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(x) for x in daemon.stdout.readline().split()]
        assert len(pids) >= 4
    finally:
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
        if not left:
            break
        time.sleep(0.1)
    assert not left, [psutil.Process(p).cmdline() for p in left]


def test_partial_level_boxes_see_the_hosts_proc_read_only(support, tmp_path):
    """Where /proc cannot be mounted (a masked /proc in a container), a box gets the host's read-only."""

    async def main():
        box = await _box((support[0], "bind"), tmp_path / "box")
        try:
            r = await box.exec(["/bin/sh", "-c", "echo $$; test -w /proc/sys/kernel/hostname || echo read-only"])
            assert r.returncode == 0 and b"read-only" in r.stdout, r
        finally:
            await box.close()

    run(main())


def test_memory_limit_by_the_watcher_without_cgroups(support, tmp_path, monkeypatch):
    """Without a writable cgroup hierarchy (an unprivileged pod), the service's watcher ends a box
    over its memory limit and says so."""
    import sandbox.limits as limits
    from gym_runtime.task_sandboxes.service import TaskSandboxService
    from gym_runtime.task_sandboxes.settings import TaskSandboxSettings

    monkeypatch.setattr(limits, "_mode", "none")
    said: list[str] = []

    async def main():
        from sandbox.taskbox import BoxError

        service = TaskSandboxService(TaskSandboxSettings(), EgressPolicy(), tmp_path / "boxes", say=said.append)
        try:
            rec = await service.create("acme", {"resources": {"memory_mib": 64}})
            assert "memory" not in rec.box.enforced
            hog = "x = []\nimport time\nwhile True:\n    x.append(bytearray(16 << 20)); time.sleep(0.05)\n"
            with pytest.raises(BoxError, match="closed"):  # the box ends under the command
                await rec.box.exec([HOST_PY, "-c", hog], timeout_s=30)
            assert rec.id not in service.boxes
        finally:
            await service.close_all()

    run(main())
    assert any("memory over 64 MiB" in s for s in said), said
