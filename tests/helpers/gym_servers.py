"""Start Gym-shaped servers and the stub model as real subprocesses on loopback (tests only).

A server is started exactly as the daemon does (docs/architecture.md §7): cwd = the server directory,
argv = ``<python> app.py``, env = ``NEMO_GYM_CONFIG_DICT`` (the YAML of every instance plus
``head_server``), ``NEMO_GYM_CONFIG_PATH`` (the instance name), ``PYTHONPATH`` (the server dir)
and nothing else but ``PATH`` and loopback ``NO_PROXY``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[2]
SERVERS = REPO / "servers"


def free_port() -> int:
    """A currently free loopback TCP port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Running:
    """A started process: its base ``url`` and a ``log`` path holding stdout+stderr."""

    url: str
    proc: subprocess.Popen
    log: Path

    def output(self) -> str:
        """Everything the process printed so far."""
        return self.log.read_text(errors="replace")


@dataclass
class GymConfig:
    """A merged Gym config under construction: instances plus ``head_server``."""

    instances: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    def add(self, name: str, server_type: str, impl: str, **settings) -> int:
        """Add instance ``name`` with a fresh port; returns the port."""
        port = free_port()
        self.instances[name] = {
            server_type: {impl: {"entrypoint": "app.py", "host": "127.0.0.1", "port": port, **settings}}
        }
        return port

    def yaml(self) -> str:
        """The YAML string given to every server in ``NEMO_GYM_CONFIG_DICT``."""
        head = {"head_server": {"host": "127.0.0.1", "port": free_port()}}
        return yaml.safe_dump({**self.extra, **head, **self.instances}, sort_keys=False)


def server_env(config_yaml: str, name: str, server_dir: Path) -> dict[str, str]:
    """The daemon-shaped environment of one server process."""
    return {
        "NEMO_GYM_CONFIG_DICT": config_yaml,
        "NEMO_GYM_CONFIG_PATH": name,
        "PYTHONPATH": str(server_dir),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "NO_PROXY": "127.0.0.1,localhost,::1",
        "no_proxy": "127.0.0.1,localhost,::1",
    }


def wait_ready(running: Running, timeout: float = 60.0) -> None:
    """Poll ``GET /`` until any HTTP answer; raises with the process output if it dies or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if running.proc.poll() is not None:
            raise RuntimeError(f"process exited with {running.proc.returncode}:\n{running.output()}")
        try:
            httpx.get(running.url + "/", timeout=2, trust_env=False)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"not ready after {timeout}s:\n{running.output()}")


def stop(running: Running) -> None:
    """TERM the process group, then KILL after a short grace; always reaps."""
    if running.proc.poll() is None:
        os.killpg(running.proc.pid, signal.SIGTERM)
        try:
            running.proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(running.proc.pid, signal.SIGKILL)
            running.proc.wait()


@contextmanager
def spawn(
    argv: list[str], cwd: Path, env: dict[str, str], url: str, log: Path, ready: bool = True, timeout: float = 60.0
) -> Iterator[Running]:
    """Start ``argv`` in its own session, wait for readiness (if ``ready``), stop it afterwards."""
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    running = Running(url, proc, log)
    try:
        if ready:
            wait_ready(running, timeout)
        yield running
    finally:
        stop(running)


@contextmanager
def start_server(
    config: GymConfig,
    name: str,
    tmp: Path,
    python: str = sys.executable,
    server_dir: Path | None = None,
    ready: bool = True,
    timeout: float = 60.0,
) -> Iterator[Running]:
    """Start instance ``name`` of ``config`` from its directory (built-in ``servers/`` by default)."""
    ((server_type, impls),) = config.instances[name].items()
    ((impl, settings),) = impls.items()
    directory = server_dir or SERVERS / server_type / impl
    url = f"http://127.0.0.1:{settings['port']}"
    env = server_env(config.yaml(), name, directory)
    with spawn([python, "app.py"], directory, env, url, tmp / f"{name}.log", ready, timeout) as running:
        yield running


@contextmanager
def start_stub(tmp: Path, *args: str) -> Iterator[Running]:
    """Start ``python -m gym_runtime.stub_model`` on a free port with extra CLI ``args``."""
    port = free_port()
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "gym_runtime.stub_model", "--host", "127.0.0.1", "--port", str(port), *args]
    with spawn(argv, REPO, env, f"http://127.0.0.1:{port}", tmp / f"stub-{port}.log") as running:
        yield running
