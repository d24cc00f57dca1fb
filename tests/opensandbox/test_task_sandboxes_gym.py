"""End to end: a server whose config names NeMo Gym 0.7.0's own ``opensandbox`` provider gets its
task sandbox made on the operator's OpenSandbox server (``opensandbox_server``) by Gym's own provider,
through the daemon's gate (docs/runtime.md, "Task sandboxes on an OpenSandbox server").

``gym-runtime up`` (sandbox backend ``local``) of a package with one resources server: its venv holds
``nemo-gym==0.7.0``, the ``opensandbox`` SDK and tenacity (PyPI; a CPython >= 3.13.14 from
``tests/helpers/gym_python.py``), its config names the top-level ``sandbox`` block in the shape of
Gym's ``nemo_gym/sandbox/providers/opensandbox/configs/opensandbox.yaml``, and on a request it starts
an ``AsyncSandbox`` with that block (``nemo_gym.sandbox.config.resolve_provider_config``), runs a
command and reports. The sandbox is listed on the operator's server with the approved image and the
server's labels; an image chosen at run time that is not approved is refused with
``GR-SANDBOX-TASK-IMAGE-DENIED``; the operator's key is in no server's environment; the stop leaves
no sandbox."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import httpx
import pytest
import yaml

from gym_runtime.task_sandboxes.osb_gate import TASK_LABEL
from sandbox.opensandbox.spec import LABEL_RUN, RunLabels
from tests.helpers.daemon import JSON_HANDLER, kill_tree, read_ready_line, up_process, write_fixture_package
from tests.helpers.gym_python import gym_python

pytestmark = [pytest.mark.opensandbox, pytest.mark.pypi, pytest.mark.slow, pytest.mark.timeout(2400)]

APP = (
    r"""# a Gym 0.7.0 server that makes task sandboxes with the provider its config names
import asyncio, json, os, threading
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

import yaml
from nemo_gym.sandbox import AsyncSandbox, SandboxSpec
from nemo_gym.sandbox.config import resolve_provider_config, resolve_provider_metadata


class TaskServer:
    ray_enabled = False

    @classmethod
    def run_webserver(cls):
        pass


name = os.environ["NEMO_GYM_CONFIG_PATH"]
config = yaml.safe_load(os.environ["NEMO_GYM_CONFIG_DICT"])
mine = next(iter(next(iter(config[name].values())).values()))
provider = resolve_provider_config(mine["sandbox_provider"], config)
metadata = resolve_provider_metadata(mine["sandbox_provider"], config)
with open(os.path.join(os.environ["HOME"], "seen.json"), "w") as f:
    json.dump({"provider": provider, "environ": dict(os.environ)}, f)
loop = asyncio.new_event_loop()
threading.Thread(target=loop.run_forever, daemon=True).start()


async def task(image):
    spec = SandboxSpec(image=image, metadata={**metadata, "row": "7"}, ttl_s=900, ready_timeout_s=120)
    box = await AsyncSandbox(provider, spec).start()
    done = await box.exec("echo task-ran && cat /etc/debian_version")
    return {"sandbox_id": box._handle.sandbox_id, "stdout": done.stdout, "code": done.return_code}


"""
    + JSON_HANDLER
    + r"""
class H(JSONHandler):
    def do_POST(self):
        row = json.loads(self.rfile.read(int(self.headers["content-length"])))
        try:
            self._send(200, asyncio.run_coroutine_threadsafe(task(row["image"]), loop).result(600))
        except Exception as e:
            self._send(500, {"error": f"{type(e).__name__}: {e}"})



TaskServer.run_webserver()
ThreadingHTTPServer((mine["host"], int(mine["port"])), H).serve_forever()
"""
)


def _package(root: Path, image: str) -> Path:
    pkg = write_fixture_package(
        root,
        {
            "acme_tasks": {
                "resources_servers": {
                    "acme_tasks": {"domain": "coding", "sandbox_provider": "sandbox", "sandbox_spec": {"image": image}}
                }
            }
        },
        apps={"acme_tasks": APP},
    )
    (pkg / "resources_servers" / "acme_tasks" / "requirements.txt").write_text(
        "nemo-gym==0.7.0\nopensandbox==1.1.1\ntenacity>=9.1.4\n"
    )
    # Gym 0.7.0's nemo_gym/sandbox/providers/opensandbox/configs/opensandbox.yaml, timeouts shortened
    (pkg / "resources_servers" / "acme_tasks" / "configs" / "opensandbox.yaml").write_text("""\
sandbox:
  default_metadata:
    sandbox-api: opensandbox-sdk
  opensandbox:
    connection:
      domain: ${oc.env:OPENSANDBOX_DOMAIN,opensandbox-server.opensandbox-system.svc.cluster.local}
      api_key: ${oc.env:OPENSANDBOX_API_KEY}
      protocol: http
      request_timeout_s: 120
      use_server_proxy: true
      transport_backend: aiohttp
      tls_verify: false
    create:
      request_timeout_s: 300
      timeout_s: 300
      connect_attempt_timeout_s: 120
      skip_health_check: false
      retries: 1
      retry_delay_s: 1.0
    probe:
      timeout_s: 60
      deadline_s: 120
    operations:
      retries: 2
      command_retries: 0
      close_timeout_s: 30
""")
    manifest = yaml.safe_load((pkg / "nemo-environment.yaml").read_text())
    manifest["config_paths"].append("resources_servers/acme_tasks/configs/opensandbox.yaml")
    (pkg / "nemo-environment.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return pkg


def test_gyms_own_provider_makes_the_task_sandbox_on_the_operators_server(opensandbox_server, tmp_path: Path) -> None:
    server = opensandbox_server
    python = gym_python()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENSANDBOX_", "GYM_RUNTIME_"))}
    env.update(
        {
            "GYM_RUNTIME_HOME": str(tmp_path / "home"),
            "GYM_RUNTIME_PYTHON": str(python),
            "GYM_RUNTIME_SANDBOX_BACKEND": "local",
            "OPENSANDBOX_DOMAIN": server.domain,
            "OPENSANDBOX_API_KEY": server.api_key,
            "GYM_RUNTIME_OPENSANDBOX_TASK_IMAGES": server.image,
            "GYM_RUNTIME_OPENSANDBOX_EGRESS": "unenforced",
        }
    )  # no egress sidecar can run here
    pkg = _package(tmp_path / "pkg", server.image)
    proc = up_process(pkg, tmp_path, env=env)
    try:
        ready = json.loads(read_ready_line(proc, timeout=1800))
        url = ready["servers"]["acme_tasks"]
        made = httpx.post(url + "/task", json={"image": server.image}, timeout=600).json()
        listed = {b["id"]: b for b in server.sandboxes()}
        refused = httpx.post(url + "/task", json={"image": "localhost/not-approved:1"}, timeout=600).json()
        seen = json.loads(next((tmp_path / "run").rglob("servers/acme_tasks/seen.json")).read_text())
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(120) == 0
        err = proc.stderr.read()
    finally:
        kill_tree(proc)
    assert "error" not in made, made
    # Gym's provider joins execd's stdout messages with newlines: 'task-ran\n\n12.x\n'
    assert made["code"] == 0 and made["stdout"].split() == ["task-ran", made["stdout"].split()[1]], made
    assert made["stdout"].split()[1].startswith("12."), made  # Debian 12: the operator's sandbox image
    box = listed[made["sandbox_id"]]
    assert box["image"]["uri"] == server.image
    meta = box["metadata"]
    assert meta[TASK_LABEL] == "acme_tasks" and meta["sandbox-api"] == "opensandbox-sdk" and meta["row"] == "7"
    assert LABEL_RUN in meta
    assert "GR-SANDBOX-TASK-IMAGE-DENIED" in refused.get("error", ""), refused
    assert "task sandbox DENY server=acme_tasks image='localhost/not-approved:1'" in err
    assert "'opensandbox' is kept" in err
    conn = seen["provider"]["opensandbox"]["connection"]
    assert conn["api_key"].startswith("gr-") and conn["use_server_proxy"] is True
    assert conn["domain"].startswith("127.0.0.1:") and conn["domain"] != server.domain
    assert server.api_key not in json.dumps(seen) + err  # the operator's key: in no server, no log line
    owner = RunLabels.new(tmp_path / "run", socket.gethostname()).owner  # this daemon's state slot
    assert meta["gym-runtime-owner"] == owner and server.sandboxes(**{"gym-runtime-owner": owner}) == []
