"""The ``gym_runtime`` provider against NeMo Gym 0.7.0's own Sandbox API (``nemo_gym.sandbox``),
talking to the daemon's task-sandbox service: registration by entry point, exec output and exit
codes, timeouts, uploads and downloads, status, a sandbox lent to another server by its lease,
close, and nothing left (NeMo Gym 0.7.0 ``nemo_gym/sandbox/providers/base.py``)."""

from __future__ import annotations

import asyncio
import json
import textwrap

import psutil
import pytest

from gym_runtime.task_sandboxes.api import TaskSandboxServer
from gym_runtime.task_sandboxes.service import TaskSandboxService
from gym_runtime.task_sandboxes.settings import TaskSandboxSettings
from sandbox import EgressPolicy
from tests.helpers.gym07 import gym07_venv

pytestmark = [pytest.mark.pypi, pytest.mark.slow]

CLIENT = textwrap.dedent("""
    import asyncio, json, os, sys, tempfile, time
    from pathlib import Path
    from nemo_gym.sandbox import (AsyncSandbox, ConnectableProvider, SandboxSpec, SandboxStatus, create_provider,
                                  list_providers)

    async def main():
        out = {"providers": list_providers()}
        provider = create_provider({"gym_runtime": {}})
        out["connectable"] = isinstance(provider, ConnectableProvider)
        spec = SandboxSpec(workdir="/workspace", env={"GREETING": "hello"}, files={"notes/a.txt": "from spec"},
                           resources={"memory_mib": 256, "cpu": 1})
        sb = await AsyncSandbox({"gym_runtime": {}}, spec).start()
        r = await sb.exec("echo $GREETING; pwd; cat notes/a.txt; echo oops >&2; exit 3")
        out["exec"] = [r.stdout, r.stderr, r.return_code, r.error_type]
        r = await sb.exec("sleep 20", timeout_s=0.5)
        out["timeout"] = [r.return_code, r.error_type]
        r = await sb.exec("true", cwd="/no/such")
        out["bad_cwd"] = [r.return_code, r.error_type]
        src = Path(tempfile.mkdtemp()) / "in.bin"
        src.write_bytes(os.urandom(300000))
        await sb.upload(src, "/workspace/data/in.bin")
        back = src.with_name("back.bin")
        await sb.download("/workspace/data/in.bin", back)
        out["roundtrip"] = back.read_bytes() == src.read_bytes()
        try:
            await sb.download("/nope", back)
            out["missing"] = "no error"
        except Exception as e:
            out["missing"] = type(e).__name__
        out["status"] = (await sb.status()).value
        descriptor = await sb.serialize()
        other = create_provider({"gym_runtime": {"token": os.environ["OTHER_TOKEN"]}})
        lent = await AsyncSandbox.connect(descriptor, provider=other)
        out["lent"] = (await lent.exec("cat /workspace/notes/a.txt")).stdout
        stranger = create_provider({"gym_runtime": {"token": os.environ["OTHER_TOKEN"]}})
        try:
            await AsyncSandbox.connect({"sandbox_id": descriptor["sandbox_id"]}, provider=stranger)
            out["no_lease"] = "allowed"
        except Exception as e:
            out["no_lease"] = str(e)[:200]
        await lent.disconnect()
        out["sandbox_id"] = descriptor["sandbox_id"]
        await sb.stop()
        out["after_stop"] = (await provider.status(sb._handle)).value
        svc = await AsyncSandbox({"gym_runtime": {}}, SandboxSpec(ports=[8000])).start()
        await svc.exec("cd /tmp && echo served > index.html && (python3 -m http.server 8000 >/dev/null 2>&1 &)")
        ep = await svc.endpoint(8000)
        import httpx
        for _ in range(50):
            try:
                out["endpoint"] = httpx.get(ep.endpoint + "/index.html", trust_env=False).text
                break
            except httpx.TransportError:
                await asyncio.sleep(0.1)
        try:
            await svc.endpoint(9000)
        except ValueError as e:
            out["undeclared"] = str(e)[:80]
        await svc.stop()
        print(json.dumps(out))

    asyncio.run(main())
""")


@pytest.fixture(scope="module")
def gym_python(tmp_path_factory):
    return gym07_venv(tmp_path_factory.mktemp("gym07") / "venv")


def test_gym_sandbox_api_against_the_service(gym_python, tmp_path):
    async def main():
        service = TaskSandboxService(TaskSandboxSettings(), EgressPolicy(), tmp_path / "boxes")
        server = TaskSandboxServer(service)
        await server.start()
        try:
            env = {
                "PATH": "/usr/bin:/bin",
                "GYM_RUNTIME_SANDBOX_URL": server.url,
                "GYM_RUNTIME_SANDBOX_TOKEN": service.token("owner_server"),
                "OTHER_TOKEN": service.token("agent_server"),
            }
            proc = await asyncio.create_subprocess_exec(
                str(gym_python), "-c", CLIENT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, err = await asyncio.wait_for(proc.communicate(), 180)
            assert proc.returncode == 0, err.decode()[-3000:]
            return json.loads(out.decode().strip().splitlines()[-1]), dict(service.boxes)
        finally:
            await server.stop()

    got, live = asyncio.run(main())
    assert "gym_runtime" in got["providers"] and got["connectable"]
    assert got["exec"] == ["hello\n/workspace\nfrom spec", "oops\n", 3, None]
    assert got["timeout"] == [125, "timeout"] and got["bad_cwd"] == [125, "sandbox"]
    assert got["roundtrip"] and got["missing"] == "FileNotFoundError"
    assert got["status"] == "running" and got["lent"] == "from spec"
    assert "GR-SANDBOX-TASK-AUTH" in got["no_lease"] and "owner_server" in got["no_lease"]
    assert got["after_stop"] == "stopped" and not live
    assert got["endpoint"] == "served\n" and "not declared" in got["undeclared"]
    assert not (tmp_path / "boxes" / got["sandbox_id"]).exists()
    assert not [p for p in psutil.process_iter(["cmdline"]) if got["sandbox_id"] in " ".join(p.info["cmdline"] or [])]
