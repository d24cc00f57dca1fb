"""How the tests and benches run ``gym-runtime`` against the test OpenSandbox server
(:class:`tests.helpers.opensandbox.server.OpenSandboxServer`).

:func:`daemon_env` is the environment of a daemon run under either backend on the bundled example
(:data:`EXAMPLE`, rows :data:`DATASET`): the server's domain, key and image, the address sandboxes
reach the daemon at (:func:`gateway`), no egress sidecar (``GYM_RUNTIME_OPENSANDBOX_EGRESS=unenforced``:
none can run here) and venvs on Debian's own Python 3.11, which the sandbox image holds at the same
path (an interpreter under ``/usr`` is never mounted). :func:`kill_server_inside` SIGKILLs a
server's process from within its sandbox and says when; :func:`sandbox_rss` measures a sandbox's
processes from the host; :func:`dry_run_example` runs ``dry-run`` on the bundled example.
:func:`connection` is the backend's connection to the server for tests that drive the backend's
objects themselves, :func:`servers_apart` and :func:`servers_together` their server specs.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import psutil

from sandbox.opensandbox.connection import OpenSandboxConnection
from sandbox.opensandbox.groups import PARENT_SOCKET

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "native-quickstart"
DATASET = ROOT / "examples" / "native-quickstart.jsonl"
SANDBOX_PYTHON = "/usr/bin/python3.11"
# run inside the sandbox with a server's name as argv[1]: SIGKILL that server (the process named so,
# its ``comm``, cut to 15 bytes: forked by the preloaded parent or started through BOOT,
# sandbox/opensandbox/groups.py; its launcher, the parent, the forwarder and its siblings are
# spared), then print the wall-clock time of the kill
KILL_APP = (
    "import os,sys,time\nname=sys.argv[1].encode()[:15]\n"
    "for p in os.listdir('/proc'):\n"
    " if p.isdigit() and int(p) != os.getpid():\n"
    "  try: c=open(f'/proc/{p}/comm','rb').read().strip()\n"
    "  except OSError: continue\n"
    "  if c == name: os.kill(int(p),9); print(repr(time.time()),flush=True)"
)


def gateway(server) -> str:
    """The podman bridge's gateway (an IPv4 address as text): the address sandboxes reach this host at."""
    for name in ("podman", "bridge"):
        r = server.docker("GET", f"/networks/{name}")
        if r.status_code == 200:
            for cfg in (r.json().get("IPAM") or {}).get("Config") or []:
                if cfg.get("Gateway"):
                    return cfg["Gateway"]
    return "10.88.0.1"


def daemon_env(server, home: Path, backend: str = "opensandbox") -> dict[str, str]:
    """This process's environment without any ``OPENSANDBOX_*`` / ``GYM_RUNTIME_*`` setting, plus a
    daemon's settings for ``backend`` (``"opensandbox"`` or ``"local"``) with state under ``home``
    (a directory under an allowed host path of ``server``: both backends may share it, and so its venvs)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENSANDBOX_", "GYM_RUNTIME_"))}
    return {
        **base,
        "GYM_RUNTIME_HOME": str(home),
        "GYM_RUNTIME_SANDBOX_BACKEND": backend,
        "OPENSANDBOX_DOMAIN": server.domain,
        "OPENSANDBOX_API_KEY": server.api_key,
        "GYM_RUNTIME_OPENSANDBOX_IMAGE": server.image,
        "GYM_RUNTIME_OPENSANDBOX_DAEMON_HOST": gateway(server),
        "GYM_RUNTIME_OPENSANDBOX_EGRESS": "unenforced",
        "GYM_RUNTIME_PYTHON": SANDBOX_PYTHON,
    }


def kill_server_inside(server, sandbox_id: str, name: str) -> float:
    """SIGKILL server ``name``'s process in sandbox ``sandbox_id`` by a command run in that sandbox (through
    the SDK, as an operator's ``exec`` would); the wall-clock time of the kill as the sandbox saw it
    (epoch seconds: the host's clock, one kernel). Raises ``AssertionError`` when no server process
    was found there, SDK errors as raised."""
    from opensandbox.sandbox import Sandbox

    async def run() -> str:
        box = await Sandbox.connect(sandbox_id, connection_config=server.connection_config())
        try:
            done = await box.commands.run(["python3", "-c", KILL_APP, name])
            return "".join(m.text for m in done.logs.stdout)
        finally:
            await box.close()

    out = asyncio.run(run()).split()
    assert out, f"no process of server {name!r} found in sandbox {sandbox_id}"
    return float(out[0])


ROLES = ("execd", "forwarder", "launcher", "parent", "server", "other")


def _role(p: psutil.Process) -> str:
    """What a process in a sandbox is, by its command line and name (see :func:`sandbox_rss`)."""
    argv = p.cmdline()
    text = " ".join(argv)
    if len(argv) > 3 and argv[1] == "-c" and argv[3] == PARENT_SOCKET:  # the parent and what it forked
        return "parent" if p.name().startswith("python") else "server"
    if any(Path(a).name == "execd" for a in argv[:2]):  # the parent's code names execd too: asked first
        return "execd"
    if "forwarder" in text:
        return "forwarder"
    if len(argv) > 1 and argv[1] == "-I":
        return "launcher"
    return "server" if "app.py" in text else "other"


def sandbox_rss(server, sandbox_id: str, pss: bool = False) -> dict[str, int]:
    """Bytes of RSS of every process in sandbox ``sandbox_id``'s container (its init, found by
    podman's inspect, and all its descendants), summed by role: ``execd`` (the agent), ``forwarder``
    (the runtime's, one per sandbox), ``launcher`` (the runtime's, one before each server: its
    limits), ``parent`` (the group's preloaded parent), ``server`` (the servers' process trees) and
    ``other`` (the entrypoint, shells). Pages shared between processes count once per process (with
    ``pss``: PSS instead, each shared page split among the processes mapping it); not counted:
    podman's ``conmon`` outside the container. Raises ``httpx.HTTPStatusError`` when podman does not
    know the container."""
    answer = server.docker("GET", f"/containers/sandbox-{sandbox_id}/json")
    answer.raise_for_status()
    init = psutil.Process(answer.json()["State"]["Pid"])
    out = dict.fromkeys(ROLES, 0)
    for p in [init, *init.children(recursive=True)]:
        try:
            out[_role(p)] += p.memory_full_info().pss if pss else p.memory_info().rss
        except psutil.Error:
            continue
    return out


def connection(server, domain: str | None = None) -> OpenSandboxConnection:
    """The backend's connection settings for the test server ``server`` (its key and image, the
    podman bridge's gateway as the daemon's address, egress unenforced); ``domain``: another
    ``host:port`` in front of its lifecycle API (a proxy)."""
    return OpenSandboxConnection(
        domain=domain or server.domain,
        api_key=server.api_key,
        image=server.image,
        daemon_host=gateway(server),
        egress="unenforced",
    )


def servers_apart(n: int, tmp: Path) -> list:
    """``n`` server specs (``server-0`` ...) that each get a sandbox of their own: each on a venv of its
    own (a link under ``tmp`` to the image's Python: sandbox/opensandbox/groups.py groups by venv)."""
    from sandbox.launch import ProcessSpec

    specs = []
    for i in range(n):
        python = tmp / f"venv-{i}" / "bin" / "python"
        python.parent.mkdir(parents=True, exist_ok=True)
        if not python.is_symlink():
            python.symlink_to(SANDBOX_PYTHON)
        specs.append(ProcessSpec(name=f"server-{i}", argv=[str(python)], cwd=tmp, env={}))
    return specs


def servers_together(n: int, tmp: Path, ports: list[int]) -> list:
    """``n`` server specs (``server-0`` ...) on one venv (a link under ``tmp`` to the image's Python),
    so one sandbox of their group holds them all; each sleeps 600 s and is said to listen on its port
    of ``ports`` (the environment's relays need one)."""
    from sandbox.launch import ProcessSpec

    python = tmp / "venv-together" / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    if not python.is_symlink():
        python.symlink_to(SANDBOX_PYTHON)
    argv = [str(python), "-c", "import time; time.sleep(600)"]
    return [ProcessSpec(name=f"server-{i}", argv=argv, cwd=tmp, env={}, ports=(ports[i],)) for i in range(n)]


def dry_run_example(env: dict[str, str], out: Path, work: Path, *flags: str) -> subprocess.CompletedProcess:
    """``dry-run`` of :data:`EXAMPLE` on :data:`DATASET` (2 samples a row, rows to ``out``, runs
    under ``work``, ``flags`` added) in a process of its own with ``env``; its exit is the caller's
    to judge (900 s at the most)."""
    argv = [sys.executable, "-m", "gym_runtime.cli.main", "dry-run", str(EXAMPLE), "--dataset", str(DATASET)]
    argv += ["--samples", "2", "--out", str(out), "--work-dir", str(work), *flags]
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)
