"""A real OpenSandbox server on loopback for the tests, on podman's Docker API (docs/runtime.md, "What the tests cover, and what they do not").

:func:`running_server` starts, in a directory of its own:

1. ``podman system service --time=0 unix://DIR/podman.sock`` with a containers.conf of its own
   (``CONTAINERS_CONF``; the host's is left alone): ``[engine] runtime = "runc"`` (Debian 12's crun
   refuses hosts with hybrid cgroups) and ``default_ulimits`` podman can set without
   ``CAP_SYS_RESOURCE`` (:data:`ULIMITS`), and a container store of its own under ``DIR``
   (``CONTAINERS_STORAGE_CONF``, :func:`storage_conf`) that reads the host store's images: the
   server lists its sandboxes from the containers podman holds, so two sessions on one store would
   list, and at their end delete, each other's sandboxes;
2. ``opensandbox-server --config DIR/sandbox.toml`` (:data:`SERVER_VERSION` from PyPI, in a venv of
   its own made once with uv under ``~/.cache/gym-runtime-tests/``) with ``DOCKER_HOST`` at that
   socket, bound to ``127.0.0.1`` on a free port, its API key random, its store in ``DIR``; the
   docker runtime with the local execd image (``tests/helpers/opensandbox/images.py``), sandbox ports
   published on ``127.0.0.1`` only, host volumes allowed under :func:`allowed_host_paths`, no egress
   sidecar (none can run here: a create with a ``networkPolicy`` is refused with HTTP 400).

and yields an :class:`OpenSandboxServer`. On exit every sandbox the server lists is deleted, the
containers podman still holds with the server's sandbox label are removed, then the server and the
podman service are stopped (SIGTERM, then SIGKILL after 30 s) and the directory removed.
Raises :class:`OpenSandboxUnavailable` (for a clean skip) when the server cannot be installed,
:class:`ServerFailed` when it or podman's service, installed, does not come up.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from filelock import FileLock

from tests.helpers.gym_python import gym_python_roots
from tests.helpers.podman import podman, tail

SERVER_VERSION = "1.1.1"
ROOT = Path(__file__).resolve().parents[3]
ULIMITS = ("nofile=20000:20000", "nproc=32768:32768")
SANDBOX_LABEL = "opensandbox.io/id"  # the label the server's docker runtime puts on every sandbox container
# Host paths a sandbox may mount (the server refuses others): temporary directories (test trees,
# GYM_RUNTIME_HOME, venvs), this checkout (built-in server trees) and the tests' tool cache (the
# cached Gym venvs); :func:`allowed_host_paths` adds the interpreter the tests of NeMo Gym 0.5 and
# later run (tests/helpers/gym_python.py: the host's own, or the one .ci/provision-python builds).
ALLOWED_HOST_PATHS = (
    tempfile.gettempdir(),
    str(ROOT),
    str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gym-runtime-tests"),
)


def allowed_host_paths() -> tuple[str, ...]:
    """:data:`ALLOWED_HOST_PATHS` and the directories of the interpreter ``gym_python()`` answers
    (:func:`~tests.helpers.gym_python.gym_python_roots`), whichever host this is."""
    return tuple(dict.fromkeys(ALLOWED_HOST_PATHS + gym_python_roots()))


READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


class OpenSandboxUnavailable(RuntimeError):
    """The server cannot be installed here; ``str()`` says why (for a clean skip)."""


class ServerFailed(RuntimeError):
    """podman's service or the server, installed, did not start; ``str()`` holds its log's tail."""


def tools_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gym-runtime-tests"


def server_venv() -> Path:
    """The venv holding ``opensandbox-server==SERVER_VERSION``, made once with uv (needs PyPI then);
    a venv is used only once its install finished (the ``.complete`` file)."""
    venv = tools_dir() / f"opensandbox-server-{SERVER_VERSION}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(venv) + ".lock"):
        if (venv / ".complete").is_file():
            return venv
        from uv import find_uv_bin

        shutil.rmtree(venv, ignore_errors=True)
        for argv in (
            [find_uv_bin(), "venv", "-q", "--python", sys.executable, str(venv)],
            [
                find_uv_bin(),
                "pip",
                "install",
                "-q",
                "--python",
                str(venv / "bin" / "python"),
                f"opensandbox-server=={SERVER_VERSION}",
            ],
        ):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                raise OpenSandboxUnavailable(
                    f"cannot install opensandbox-server {SERVER_VERSION}: "
                    f"`{' '.join(map(str, argv))}` failed: {tail(done.stderr)}"
                )
        (venv / ".complete").write_text(f"opensandbox-server=={SERVER_VERSION}\n")
        return venv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen | None) -> None:
    """SIGTERM to the process's group (it runs in a session of its own), SIGKILL after the deadline."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, STOP_TIMEOUT_S)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return


def _wait_ready(probe, proc: subprocess.Popen, log: Path, what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerFailed(f"{what} exited with {proc.returncode}: {tail(log.read_text(), 20)}")
        try:
            if probe():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise ServerFailed(f"{what} not ready in {READY_TIMEOUT_S:.0f} s: {tail(log.read_text(), 20)}")


@dataclass
class OpenSandboxServer:
    """A running server. ``domain`` (``127.0.0.1:PORT``), ``api_key`` and ``protocol`` are what
    ``OPENSANDBOX_DOMAIN`` / ``OPENSANDBOX_API_KEY`` / ``OPENSANDBOX_PROTOCOL`` take (and the SDK's
    ``ConnectionConfig``); ``image`` is the sandbox image servers run in, ``execd_image`` the
    server's; ``allowed_host_paths`` the roots host volumes must sit under; ``docker_host`` the
    podman socket (``unix://...``) and ``podman_process`` the ``podman system service`` serving it;
    ``start_seconds`` how long each (re)start took to ``/health``."""

    domain: str
    api_key: str
    image: str
    execd_image: str
    allowed_host_paths: tuple[str, ...]
    docker_host: str
    workdir: Path
    protocol: str = "http"
    version: str = SERVER_VERSION
    start_seconds: list[float] = field(default_factory=list)
    process: subprocess.Popen | None = field(default=None, repr=False)
    podman_process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"{self.protocol}://{self.domain}"

    def api(self, method: str, path: str, **kw) -> httpx.Response:
        """One request to the lifecycle API (``/v1`` + ``path``) with the API key."""
        headers = {"OPEN-SANDBOX-API-KEY": self.api_key, **kw.pop("headers", {})}
        return httpx.request(method, f"{self.base_url}/v1{path}", headers=headers, timeout=60, **kw)

    def sandboxes(self, **metadata: str) -> list[dict]:
        """Every sandbox the server lists (all pages), those whose metadata holds ``metadata`` when given."""
        found: list[dict] = []
        page = 1
        while True:
            params: dict[str, object] = {"page": page, "pageSize": 200}
            if metadata:
                params["metadata"] = "&".join(f"{k}={v}" for k, v in metadata.items())
            answer = self.api("GET", "/sandboxes", params=params)
            answer.raise_for_status()
            body = answer.json()
            found += body["items"]
            if not body.get("pagination", {}).get("hasNextPage"):
                return found
            page += 1

    def connection_config(self, **kw):
        """The SDK's ``ConnectionConfig`` for this server (``kw`` passed on, e.g. ``request_timeout``)."""
        from opensandbox.config import ConnectionConfig

        return ConnectionConfig(domain=self.domain, api_key=self.api_key, protocol=self.protocol, **kw)

    def docker(self, method: str, path: str, **kw) -> httpx.Response:
        """One request to podman's Docker API (the socket the server uses)."""
        transport = httpx.HTTPTransport(uds=self.docker_host.removeprefix("unix://"))
        with httpx.Client(transport=transport, base_url="http://podman", timeout=120) as client:
            return client.request(method, path, **kw)

    def containers(self) -> list[dict]:
        """Containers podman holds (running or not) that carry the server's sandbox label."""
        filters = json.dumps({"label": [SANDBOX_LABEL]})
        answer = self.docker("GET", "/containers/json", params={"all": "true", "filters": filters})
        answer.raise_for_status()
        return answer.json()

    def kill_sandbox(self, sandbox_id: str) -> None:
        """SIGKILL the sandbox's container from outside the server (as the OOM killer or an operator's
        ``docker kill`` would): the server then reports it ``Failed`` (exit 137). Under podman (not
        under Docker) the server cannot delete it afterwards: its delete answers 500
        ``DOCKER::SANDBOX_DELETE_FAILED`` (docs/runtime.md, "What the tests cover, and what they do not"); :meth:`remove_sandbox` then does."""
        self.docker("POST", f"/containers/sandbox-{sandbox_id}/kill").raise_for_status()

    def remove_sandbox(self, sandbox_id: str) -> None:
        """Remove the sandbox's container from outside the server (an operator's ``docker rm -f``, a
        reaped pod): the server then answers 404 for it."""
        self.docker("DELETE", f"/containers/sandbox-{sandbox_id}", params={"force": "true"}).raise_for_status()

    def start(self) -> None:
        """Start the server process (again) on the same port and config; wait for ``/health``."""
        venv = server_venv()
        log = self.workdir / "server.log"
        env = {**os.environ, "DOCKER_HOST": self.docker_host, "HOME": str(self.workdir)}
        t0 = time.monotonic()
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [str(venv / "bin" / "opensandbox-server"), "--config", str(self.workdir / "sandbox.toml")],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        _wait_ready(
            lambda: httpx.get(f"{self.base_url}/health", timeout=5).status_code == 200,
            self.process,
            log,
            f"opensandbox-server {SERVER_VERSION}",
        )
        self.start_seconds.append(round(time.monotonic() - t0, 2))

    def stop(self) -> None:
        """Stop the server process (SIGTERM; its sandboxes live on in podman, as on a real restart)."""
        _stop(self.process)

    def start_if_stopped(self) -> None:
        """:meth:`start` unless the server process runs (a test that stopped it and failed before
        starting it again leaves the session's later tests a server)."""
        if self.process is None or self.process.poll() is not None:
            self.start()

    def restart(self) -> None:
        self.stop()
        self.start()

    def delete_all(self) -> None:
        """Delete every sandbox the server lists, then remove any container left with its label."""
        if self.process is not None and self.process.poll() is None:
            for box in self.sandboxes():
                self.api("DELETE", f"/sandboxes/{box['id']}")
        for c in self.containers():
            self.docker("DELETE", f"/containers/{c['Id']}", params={"force": "true"})


def storage_conf(workdir: Path) -> str:
    """A ``storage.conf`` keeping containers, volumes and layers under ``workdir`` (overlay, as the
    host store), with the host's store as a read-only image store (``additionalimagestores``): the
    images :mod:`tests.helpers.opensandbox.images` builds there are seen, nothing else is."""
    host = podman("info", "--format", "{{.Store.GraphRoot}}", timeout=60).stdout.strip()
    return (
        f'[storage]\ndriver = "overlay"\ngraphroot = "{workdir / "store"}"\nrunroot = "{workdir / "run"}"\n\n'
        f"[storage.options]\nadditionalimagestores = {json.dumps([host])}\n"
    )


def config_toml(
    port: int, api_key: str, execd_image: str, workdir: Path, allowed: tuple[str, ...], drop: tuple[str, ...] = ()
) -> str:
    """The server's config (keys of opensandbox-server's ``AppConfig``); ``drop``: capabilities its
    sandboxes lose (``[docker] drop_capabilities``; empty: the server's default list)."""
    dropped = f"drop_capabilities = {json.dumps(list(drop))}\n" if drop else ""
    return f"""[server]
host = "127.0.0.1"
port = {port}
api_key = "{api_key}"

[runtime]
type = "docker"
execd_image = "{execd_image}"

[store]
path = "{workdir / "opensandbox.db"}"

[storage]
allowed_host_paths = {json.dumps(list(allowed))}

[docker]
network_mode = "bridge"
publish_host = "127.0.0.1"
pids_limit = 4096
no_new_privileges = true
{dropped}"""


@contextmanager
def running_server(
    image: str, execd_image: str, allowed: tuple[str, ...] | None = None, drop: tuple[str, ...] = ()
) -> Iterator[OpenSandboxServer]:
    """A podman service and an OpenSandbox server on it (module doc); torn down on exit. ``allowed``:
    its ``allowed_host_paths`` (default :func:`allowed_host_paths`; ``()``: every host mount
    refused); ``drop``: see :func:`config_toml`."""
    allowed = allowed_host_paths() if allowed is None else allowed
    server_venv()  # install (or find) it before any process starts
    workdir = Path(tempfile.mkdtemp(prefix="opensandbox-server-"))
    sock = workdir / "podman.sock"
    (workdir / "containers.conf").write_text(
        f'[containers]\ndefault_ulimits = {json.dumps(list(ULIMITS))}\n\n[engine]\nruntime = "runc"\n'
    )
    (workdir / "storage.conf").write_text(storage_conf(workdir))
    podman_log = workdir / "podman.log"
    podman_proc = None
    server = OpenSandboxServer(
        domain="",
        api_key=secrets.token_hex(16),
        image=image,
        execd_image=execd_image,
        allowed_host_paths=allowed,
        docker_host=f"unix://{sock}",
        workdir=workdir,
    )
    try:
        with open(podman_log, "wb") as out:
            podman_proc = subprocess.Popen(
                ["podman", "system", "service", "--time=0", f"unix://{sock}"],
                env={
                    **os.environ,
                    "CONTAINERS_CONF": str(workdir / "containers.conf"),
                    "CONTAINERS_STORAGE_CONF": str(workdir / "storage.conf"),
                },
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        server.podman_process = podman_proc
        _wait_ready(
            lambda: sock.exists() and server.docker("GET", "/_ping").status_code == 200,
            podman_proc,
            podman_log,
            "podman system service",
        )
        port = free_port()
        server.domain = f"127.0.0.1:{port}"
        (workdir / "sandbox.toml").write_text(config_toml(port, server.api_key, execd_image, workdir, allowed, drop))
        server.start()
        yield server
    finally:
        try:
            if podman_proc is not None and podman_proc.poll() is None:
                server.delete_all()
        finally:
            server.stop()
            _stop(podman_proc)
            shutil.rmtree(workdir, ignore_errors=True)
