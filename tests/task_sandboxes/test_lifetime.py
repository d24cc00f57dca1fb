"""Who owns a task sandbox and when it ends: with its owner's process (a crash, a restart), at
``ttl_s``, at the daemon's stop; counted per server; refused to other servers without the lease,
past the per-server maximum, for an image that is nowhere (docs/runtime.md, "Task sandboxes")."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psutil
import pytest

from gym_runtime.supervise.logs import LogSink
from gym_runtime.supervise.member import Member
from gym_runtime.task_sandboxes.service import TaskSandboxError, TaskSandboxService
from gym_runtime.task_sandboxes.settings import TaskSandboxSettings
from sandbox import EgressPolicy, ProcessSpec, Sandbox, probe_isolation
from sandbox.taskbox import box_support


@pytest.fixture(autouse=True)
def _boxes_here():
    if isinstance(box_support(probe_isolation()), str):
        pytest.skip(box_support(probe_isolation()))


def _member(tmp: Path, name: str) -> Member:
    return Member(name, "server", None, None, LogSink(tmp / f"{name}.log"))


async def _gone(service: TaskSandboxService, box_id: str, pids: list[int], within: float = 5.0) -> bool:
    until = time.monotonic() + within
    while time.monotonic() < until:
        if (
            box_id not in service.boxes
            and not (service.work_dir / box_id).exists()
            and not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
        ):
            return True
        await asyncio.sleep(0.05)
    return False


def test_boxes_end_with_their_servers_process_at_ttl_and_at_the_stop(tmp_path):
    async def main():
        launcher = await Sandbox.start(EgressPolicy(), tmp_path / "sb", level="none")
        member = _member(tmp_path, "acme")
        service = TaskSandboxService(TaskSandboxSettings(), EgressPolicy(), tmp_path / "boxes", {"acme": member})
        try:
            member.proc = launcher.spawn(ProcessSpec("acme", ["/bin/sleep", "60"], tmp_path, {"PATH": "/bin"}))
            a = await service.create("acme", {})
            b = await service.create("acme", {"image": None, "workdir": "/srv"})
            assert member.info["sandboxes"] == 2 and service.counts() == {"acme": 2}
            pids = [p.pid for r in (a, b) for p in r.box.processes()]
            member.proc.kill_now()  # the server crashes
            assert await _gone(service, a.id, pids) and await _gone(service, b.id, [])
            assert member.info["sandboxes"] == 0 and not (tmp_path / "boxes" / a.id).exists()

            member.proc = launcher.spawn(ProcessSpec("acme", ["/bin/sleep", "60"], tmp_path, {"PATH": "/bin"}))
            timed = await service.create("acme", {"ttl_s": 0.5})
            kept = await service.create("acme", {})
            assert await _gone(service, timed.id, [p.pid for p in timed.box.processes()], within=5)
            assert kept.id in service.boxes  # the ttl of one ends that one only

            old = member.proc  # a restart: the new process starts with none of the old one's boxes
            member.proc = launcher.spawn(ProcessSpec("acme", ["/bin/sleep", "60"], tmp_path, {"PATH": "/bin"}))
            fresh = await service.create("acme", {})
            old.kill_now()
            assert await _gone(service, kept.id, [])
            assert fresh.id in service.boxes and member.info["sandboxes"] == 1
            pids = [p.pid for p in fresh.box.processes()]
        finally:
            await service.close_all()
            await launcher.close()
        assert not service.boxes and await _gone(service, fresh.id, pids)
        with pytest.raises(TaskSandboxError, match="stopping"):
            await service.create("acme", {})

    asyncio.run(main())


def test_access_limits_and_images_are_refused_with_their_codes(tmp_path):
    async def main():
        settings = TaskSandboxSettings(max_per_server=1, image_dirs=(tmp_path / "images",))
        service = TaskSandboxService(settings, EgressPolicy(), tmp_path / "boxes")
        try:
            rec = await service.create("owner", {"resources": {"memory_mib": 99999, "cpu": 64}})
            assert rec.box.limits.memory_mb == 4096  # capped by GYM_RUNTIME_SANDBOX_MEMORY_MB
            assert service.record(rec.id, "owner") is rec and service.record(rec.id, "other", rec.lease) is rec
            with pytest.raises(TaskSandboxError) as e:
                service.record(rec.id, "other")
            assert e.value.code == "GR-SANDBOX-TASK-AUTH" and e.value.status == 403 and "'owner'" in e.value.message
            with pytest.raises(TaskSandboxError) as e:
                await service.create("owner", {})
            assert e.value.code == "GR-SANDBOX-TASK-LIMIT" and e.value.status == 429
            with pytest.raises(TaskSandboxError) as e:
                await service.create("other", {"image": "acme/missing:2"})
            assert e.value.code == "GR-SANDBOX-TASK-IMAGE" and "'acme/missing:2'" in e.value.message
            assert str(tmp_path / "images" / "docker.io/acme/missing/2") in e.value.message
            for bad in ({"resources": {"gpu": 1}}, {"workdir": "relative"}, {"env": {"A": 1}}, {"ports": [0]}):
                with pytest.raises(TaskSandboxError) as e:
                    await service.create("other", bad)
                assert e.value.code == "GR-SANDBOX-TASK-SPEC"
            with pytest.raises(TaskSandboxError) as e:
                service.owner_of("not-a-token")
            assert e.value.code == "GR-SANDBOX-TASK-AUTH"
            assert service.owner_of(service.token("owner")) == "owner"
        finally:
            await service.close_all()

    asyncio.run(main())


def test_untrusted_requests_are_bounded_and_never_end_a_box(tmp_path):
    """A command or env too long for one request is refused at the API; a malformed request to a
    box's joiner gets an error answer and the box keeps working."""
    import httpx

    from gym_runtime.task_sandboxes.api import MAX_COMMAND, TaskSandboxServer

    async def main():
        service = TaskSandboxService(TaskSandboxSettings(), EgressPolicy(), tmp_path / "boxes")
        server = TaskSandboxServer(service)
        await server.start()
        try:
            async with httpx.AsyncClient(
                base_url=server.url, trust_env=False, headers={"Authorization": "Bearer " + service.token("acme")}
            ) as c:
                box = (await c.post("/v1/sandboxes", json={})).json()["sandbox_id"]
                r = await c.post(f"/v1/sandboxes/{box}/exec", json={"command": "x" * (MAX_COMMAND + 1)})
                assert r.status_code == 400 and r.json()["error"]["code"] == "GR-SANDBOX-TASK-SPEC"
                r = await c.post(f"/v1/sandboxes/{box}/exec", json={"command": "true", "env": {"A": "x" * (1 << 20)}})
                assert r.status_code == 400
                reply, _ = await service.boxes[box].box.joiner.request({"op": "exec"})  # no argv
                assert "bad request" in reply["error"]
                r = await c.post(f"/v1/sandboxes/{box}/exec", json={"command": "echo '" + "\u00e9" * (200 << 10) + "'"})
                assert r.status_code == 413, r.text  # fits the API's bound, not one message once JSON-escaped
                r = await c.post(f"/v1/sandboxes/{box}/exec", json={"command": "echo still here"})
                assert r.json()["stdout"] == "still here\n"
        finally:
            await server.stop()

    asyncio.run(main())
