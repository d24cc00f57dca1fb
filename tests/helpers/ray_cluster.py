"""A real multi-node Ray cluster on this one machine, every node on 127.0.0.1, for placement tests.

Ray's own ``ray.cluster_utils.Cluster`` runs in a small control process (``python -m
tests.helpers.ray_cluster DIR``) that reads one command per line on stdin and answers one JSON line
on stdout::

    add NAME {"num_cpus": 2, "resources": {...}, "labels": {...}}   -> {"node_id": ...}
    add NAME {..., "no_user_namespaces": true}   a node whose raylet (and so every process it starts)
                     runs in its own user namespace with ``user.max_user_namespaces=0``: no
                     process of that node can make a user namespace, as on a host where an
                     operator set that sysctl to 0 (its sandboxes get isolation ``none``)
    kill NAME        SIGKILL the node's raylet (its workers and their children go with it)
    revive NAME {...}  if the node's raylet exited (or the node is not there), drop what is left of
                     it and start it again with those args   -> {"node_id": ... | null, "log": "..."}
    stop             every node down                                 -> {"stopped": true}

Why a separate process: the test process never becomes a Ray node or driver, and Ray's address
file goes to the cluster's own directory (``RAY_TMPDIR``), so other clusters on this host are
not affected. ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray resolve every node address to
127.0.0.1 (it otherwise replaces a loopback ``--node-ip-address`` with the host's own IP);
drivers that join (``gym-runtime up``) get the same variables from :attr:`LocalRayCluster.env`.
On a loaded two-core machine Ray's start-up deadlines are too short (the dashboard agent alone
can take 20 s to import; a node must register within 30 s): the control process waits for its
agents up to ``RAY_agent_register_timeout_ms`` and lets a node take up to 90 s to register (it
wraps ``ray._private.services.get_node``, which the start-up loop polls, in a patient retry), and
the agents' port files are written before each raylet starts (:func:`_ports_known_before_raylet`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

CLUSTER_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_agent_register_timeout_ms": "120000",
}
ROOT = Path(__file__).resolve().parents[2]


class LocalRayCluster:
    """Client side. ``start(workers)`` with ``{name: node_args}`` (the head gets ``num_cpus=1``
    and resource ``{"head": 1}``); then ``address`` (GCS ``127.0.0.1:port``), ``node_ids``
    (name -> Ray node id), ``kill_raylet(name)``, ``add(name, args)``, ``stop()``;
    ``leftovers()`` lists processes of this cluster still alive (found by their ``RAY_TMPDIR``).
    ``python``: the interpreter that runs the cluster (default this one; another venv's Python runs
    a cluster of that venv's Ray)."""

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python
        self.dir = Path(tempfile.mkdtemp(prefix="grc-", dir="/tmp"))  # short: unix socket paths <= 107 bytes
        self.env = {**os.environ, **CLUSTER_ENV, "RAY_TMPDIR": str(self.dir)}
        self.proc: subprocess.Popen | None = None
        self.address = ""
        self.node_ids: dict[str, str] = {}
        self.workers: dict[str, dict] = {}  # name -> the args it was added with

    def start(self, workers: dict[str, dict], timeout_s: float = 240, attempts: int = 3) -> LocalRayCluster:
        """Start the head, then each worker. On a loaded machine Ray's own start-up deadlines (30 s
        for a raylet to register) can pass: a failed start is tried again, up to ``attempts``."""
        for attempt in range(attempts):
            try:
                self._start_head(timeout_s)
                for name, args in workers.items():
                    self.add(name, args, timeout_s)
                return self
            except RuntimeError:
                self.stop(keep_dir=True)
                if attempt == attempts - 1:
                    raise
        return self

    def _start_head(self, timeout_s: float) -> None:
        self.node_ids = {}
        self.proc = subprocess.Popen(
            [self.python, "-m", "tests.helpers.ray_cluster", str(self.dir)],
            cwd=ROOT,
            env={**self.env, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(self.dir / "control.log", "w"),
            text=True,
            start_new_session=True,
            preexec_fn=_term_with_parent,
        )
        self.address = self._answer(timeout_s)["address"]

    def _answer(self, timeout_s: float) -> dict:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("{"):
                out = json.loads(line)
                if "error" in out:
                    raise RuntimeError(f"ray test cluster: {out['error']} (log: {self.dir / 'control.log'})")
                return out
            if not line and self.proc.poll() is not None:
                break
        raise RuntimeError(
            f"ray test cluster did not answer (log: {self.dir / 'control.log'}):\n"
            + (self.dir / "control.log").read_text()[-3000:]
        )

    def _send(self, line: str, timeout_s: float = 240) -> dict:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._answer(timeout_s)

    def add(self, name: str, args: dict, timeout_s: float = 240) -> str:
        """Start worker ``name`` (tried twice: see :meth:`start`); returns its node id."""
        self.workers[name] = args
        try:
            self.node_ids[name] = self._send(f"add {name} {json.dumps(args)}", timeout_s)["node_id"]
        except RuntimeError:
            self.node_ids[name] = self._send(f"add {name} {json.dumps(args)}", timeout_s)["node_id"]
        return self.node_ids[name]

    def ensure(self, name: str) -> str:
        """Worker ``name`` up: if its raylet exited (killed by a test, or on a loaded machine dropped
        by the cluster after missed health checks) or it is not there, start it again with the args
        it was added with. Returns what was found and the tail of the exited raylet's logs, or ""
        when it was up."""
        try:
            found = self._send(f"revive {name} {json.dumps(self.workers[name])}")
        except RuntimeError:  # Ray's start-up deadline passed on a loaded machine: once more, as add() does
            found = self._send(f"revive {name} {json.dumps(self.workers[name])}")
        if found["node_id"] is None:
            return ""
        self.node_ids[name] = found["node_id"]
        return f"node {name} was down; started again. Its raylet's logs:\n{found['log']}"

    def ensure_all(self) -> list[str]:
        """:meth:`ensure` for every worker; returns what was said for those that were down."""
        return [note for name in list(self.workers) if (note := self.ensure(name))]

    def kill_raylet(self, name: str) -> None:
        self._send(f"kill {name}")
        self.node_ids.pop(name, None)

    def leftovers(self) -> list[psutil.Process]:
        mine = f"RAY_TMPDIR={self.dir}"
        out = []
        for p in psutil.process_iter():
            try:
                if any(e == mine for e in (f"{k}={v}" for k, v in p.environ().items())):
                    out.append(p)
            except psutil.Error:
                pass
        return [p for p in out if p.pid != os.getpid()]

    def stop(self, keep_dir: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self._send("stop", 120)
            except RuntimeError:
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for p in self.leftovers():  # never leave a node behind, even after a failed stop
            try:
                p.kill()
            except psutil.Error:
                pass
        if not keep_dir:
            subprocess.run(["rm", "-rf", str(self.dir)], check=False)


def _term_with_parent() -> None:
    """The control process gets SIGTERM when the test process dies (then stops every node)."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _ports_known_before_raylet() -> None:
    """Ray 2.60's raylet waits a fixed 15 s for its agents to write their port files and aborts
    after that; a minimal dashboard agent (no ``ray[default]``) writes -1 for its three ports and
    the runtime-env agent the port it was given. Writing those same values just before the raylet
    starts lets a slow agent start on a loaded machine (the raylet retries reaching it)."""
    from ray._private.node import Node
    from ray._raylet import (
        DASHBOARD_AGENT_LISTEN_PORT_NAME,
        METRICS_AGENT_PORT_NAME,
        METRICS_EXPORT_PORT_NAME,
        RUNTIME_ENV_AGENT_PORT_NAME,
        persist_port,
    )

    ray_start_raylet = Node.start_raylet

    def start_raylet(node, *args, **kwargs):
        for name in (METRICS_AGENT_PORT_NAME, METRICS_EXPORT_PORT_NAME, DASHBOARD_AGENT_LISTEN_PORT_NAME):
            persist_port(node.get_session_dir_path(), node.node_id, name, -1)
        persist_port(
            node.get_session_dir_path(),
            node.node_id,
            RUNTIME_ENV_AGENT_PORT_NAME,
            node._ray_params.runtime_env_agent_port,
        )
        return ray_start_raylet(node, *args, **kwargs)

    Node.start_raylet = start_raylet


def _raylet_without_user_namespaces():
    """While it is active, a raylet Ray starts runs under ``unshare --user --map-root-user`` with the
    new namespace's ``user.max_user_namespaces`` set to 0 before it ``exec``s (the same pid: Ray keeps
    tracking it); its workers and their children inherit the namespace and the limit. The host's own
    limit is untouched (the sysctl is per user namespace)."""
    import contextlib

    import ray._private.services as services
    from ray._private import ray_constants

    ray_start = services.start_ray_process

    def start(command, process_type, *args, **kwargs):
        if process_type == ray_constants.PROCESS_TYPE_RAYLET:
            command = [
                "unshare",
                "--user",
                "--map-root-user",
                "sh",
                "-c",
                'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"',
                "sh",
                *command,
            ]
        return ray_start(command, process_type, *args, **kwargs)

    @contextlib.contextmanager
    def active():
        services.start_ray_process = start
        try:
            yield
        finally:
            services.start_ray_process = ray_start

    return active()


def _control(directory: str) -> None:
    """The control process: ``ray.cluster_utils.Cluster`` driven by stdin commands (module doc)."""
    import signal
    import socket

    import ray._private.services as services
    from ray.cluster_utils import Cluster

    ray_get_node = services.get_node

    def patient_get_node(gcs_address: str, node_id: str):  # see the module doc
        deadline = time.monotonic() + 90
        while True:
            try:
                return ray_get_node(gcs_address, node_id)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    services.get_node = patient_get_node
    _ports_known_before_raylet()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # unwinds into cluster.shutdown()

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def node_args(args: dict) -> dict:
        return {
            "node_ip_address": "127.0.0.1",
            "include_dashboard": False,
            "dashboard_agent_listen_port": free_port(),
            "metrics_agent_port": free_port(),
            "metrics_export_port": free_port(),
            "runtime_env_agent_port": free_port(),
            **args,
        }

    def say(obj: dict) -> None:
        print(json.dumps(obj), flush=True)

    temp = Path(directory) / "ray"  # Ray's default under RAY_TMPDIR: every node and its address file
    temp.mkdir(exist_ok=True)
    cluster = Cluster(initialize_head=True, head_node_args=node_args({"num_cpus": 1, "resources": {"head": 1}}))
    try:
        _serve(cluster, node_args, say)
    finally:
        cluster.shutdown()
    say({"stopped": True})


def _serve(cluster, node_args, say) -> None:
    say({"address": cluster.address})
    nodes = {}
    for line in sys.stdin:
        cmd, _, rest = line.strip().partition(" ")
        try:
            if cmd == "add":
                name, _, text = rest.partition(" ")
                nodes[name] = _add(cluster, node_args, json.loads(text))
                say({"node_id": nodes[name].node_id})
            elif cmd == "revive":
                name, _, text = rest.partition(" ")
                node = nodes.get(name)
                dead = [p for kind, p in node.dead_processes() if kind == "raylet"] if node is not None else []
                if node is not None and not dead:
                    say({"node_id": None, "log": ""})
                    continue
                log = _log_tails(node, dead)
                if nodes.pop(name, None) is not None:  # once: a failed add below leaves nothing to remove again
                    cluster.remove_node(node, allow_graceful=False)
                nodes[name] = _add(cluster, node_args, json.loads(text))
                say({"node_id": nodes[name].node_id, "log": log})
            elif cmd == "kill":
                nodes.pop(rest).kill_raylet()
                say({"killed": rest})
            elif cmd == "stop":
                break
        except Exception as e:  # answer, never hang the test
            say({"error": repr(e)})


def _add(cluster, node_args, args: dict):
    """``cluster.add_node`` with ``args`` (``no_user_namespaces``: see the module doc)."""
    if args.pop("no_user_namespaces", False):
        with _raylet_without_user_namespaces():
            return cluster.add_node(**node_args(args))
    return cluster.add_node(**node_args(args))


def _log_tails(node, dead: list, size: int = 2000) -> str:
    """The last ``size`` bytes of each log file of ``node``'s processes in ``dead``."""
    out = []
    for infos in node.all_processes.values() if node is not None else []:
        for info in infos:
            if info.process in dead:
                for f in (info.stdout_file, info.stderr_file):
                    name = getattr(f, "name", f)
                    if isinstance(name, str) and os.path.isfile(name):
                        out.append(f"--- {name}\n" + Path(name).read_bytes()[-size:].decode(errors="replace"))
    return "\n".join(out)


if __name__ == "__main__":
    _control(sys.argv[1])
