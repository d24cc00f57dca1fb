"""Environment packages of stdlib-only, Gym-shaped fixture servers for daemon tests (no PyPI).

``FIXTURE_APP`` honours Gym's process contract the way a real server does: it reads
``NEMO_GYM_CONFIG_DICT`` (the merged YAML; a tiny line parser, since the venv has no PyYAML) and
``NEMO_GYM_CONFIG_PATH``, binds its instance's host/port, answers ``GET /`` with
``{"status":"ok"}`` and ``POST /run`` with ``{"reward": 1.0, "instance", "row"}`` (the row's
``fixture_reward`` instead of 1.0 when it has one); it also dumps
its environment and argv to ``$HOME/contract.json`` for contract checks. Behaviour switches come
from the instance config: ``fixture_exit: N`` (exit with status N at start), ``fixture_sleep: S``
(sleep S seconds before binding), ``fixture_fail_row: true`` (``/run`` answers 500).

A package with an agent also ships ``environment_servers/legacy_agent/`` as ``FIXTURE_RELAY_APP``
(a stdlib relay: every ``POST`` is passed to the agent its ``agent_server`` names, the answer,
its headers included, back unchanged), so the relays the 0.7 line generates in front of agents (docs/environment-packages.md,
"Composition") run from the package, not from the built-in relay's PyPI venv.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import yaml

# what every fixture server's handler shares (JSON answers, `GET /` healthy, no access log); an app's
# text puts it after its imports of json and BaseHTTPRequestHandler and subclasses JSONHandler
JSON_HANDLER = r"""
class JSONHandler(BaseHTTPRequestHandler):
    def _send(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code); self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        self._send(200, {"status": "ok"})
    def log_message(self, *a):
        pass
"""

FIXTURE_APP = (
    r"""# test fixture: a Gym-shaped stdlib server (see tests/helpers/daemon.py)
import json, os, sys, time
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

name = os.environ["NEMO_GYM_CONFIG_PATH"]
text = os.environ["NEMO_GYM_CONFIG_DICT"]
mine, cfg = False, {}
for line in text.splitlines():
    if not line.startswith(" "):
        mine = line == name + ":"
    elif mine and line.startswith("      ") and not line.startswith("       ") and ": " in line:
        k, v = line.strip().split(": ", 1)
        cfg[k] = v.strip("'\"")
with open(os.path.join(os.environ["HOME"], "contract.json.tmp"), "w") as f:  # renamed: never read half-written
    json.dump({"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ), "cfg": cfg}, f)
os.replace(os.path.join(os.environ["HOME"], "contract.json.tmp"), os.path.join(os.environ["HOME"], "contract.json"))
if "fixture_exit" in cfg:
    print("fixture: exiting with", cfg["fixture_exit"], file=sys.stderr, flush=True)
    sys.exit(int(cfg["fixture_exit"]))
time.sleep(float(cfg.get("fixture_sleep", 0)))
"""
    + JSON_HANDLER
    + r"""
class H(JSONHandler):
    def do_POST(self):
        row = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if cfg.get("fixture_fail_row") == "true":
            return self._send(500, {"detail": "fixture failure"})
        time.sleep(float(row.get("sleep", 0)))
        self._send(200, {"reward": row.get("fixture_reward", 1.0), "instance": name, "row": row})
        # tests wait for this line: one write(2) per line, so rows answered at once never interleave
        os.write(1, f"fixture: answered row {json.dumps(row.get('i'))}\n".encode())

print("fixture", name, "listening on", cfg["host"], cfg["port"], flush=True)
ThreadingHTTPServer((cfg["host"], int(cfg["port"])), H).serve_forever()
"""
)

FIXTURE_RELAY_APP = r"""# test fixture: a stdlib legacy_agent relay (see tests/helpers/daemon.py)
import json, os, sys, urllib.error, urllib.request
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

name = os.environ["NEMO_GYM_CONFIG_PATH"]
blocks, cur, in_ref = {}, None, False
for line in os.environ["NEMO_GYM_CONFIG_DICT"].splitlines():
    if not line.startswith(" "):
        cur, in_ref = line[:-1], False
        blocks.setdefault(cur, {})
    elif line.startswith("      ") and not line.startswith("       "):
        in_ref = line.strip() == "agent_server:"
        if ": " in line:
            k, v = line.strip().split(": ", 1)
            blocks[cur][k] = v.strip("'\"")
    elif in_ref and line.strip().startswith("name: "):
        blocks[cur]["agent"] = line.strip()[len("name: "):].strip("'\"")
cfg = blocks[name]
with open(os.path.join(os.environ["HOME"], "contract.json.tmp"), "w") as f:  # renamed: never read half-written
    json.dump({"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ), "cfg": cfg}, f)
os.replace(os.path.join(os.environ["HOME"], "contract.json.tmp"), os.path.join(os.environ["HOME"], "contract.json"))
agent = blocks[cfg["agent"]]
upstream = f"http://{agent['host']}:{agent['port']}"
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

class H(BaseHTTPRequestHandler):
    def _send(self, code, body, headers=()):
        self.send_response(code)
        for k, v in headers:
            if k.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server"):
                self.send_header(k, v)
        if not any(k.lower() == "content-type" for k, _ in headers):
            self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        self._send(200, b'{"status": "ok"}')
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        req = urllib.request.Request(upstream + self.path, data=body, method="POST",
                                     headers={"content-type": "application/json"})
        try:
            with opener.open(req, timeout=600) as r:
                self._send(r.status, r.read(), r.headers.items())
        except urllib.error.HTTPError as e:
            self._send(e.code, e.read(), e.headers.items())
    def log_message(self, *a):
        pass

print("fixture relay", name, "for", cfg["agent"], "listening on", cfg["host"], cfg["port"], flush=True)
ThreadingHTTPServer((cfg["host"], int(cfg["port"])), H).serve_forever()
"""


def write_fixture_package(
    root: Path, instances: dict[str, dict], apps: dict[str, str] | None = None, name: str = "acme-daemon-env"
) -> Path:
    """A native-v1 package: ``instances`` maps instance name -> ``{server_type: {impl: cfg}}``
    (``entrypoint: app.py`` is added); every implementation gets ``FIXTURE_APP`` (or
    ``apps[impl]``) and a comment-only requirements.txt. One config file per server type dir.
    With an agent, the package also ships the stdlib relay ``environment_servers/legacy_agent``."""
    root.mkdir(parents=True, exist_ok=True)
    by_dir: dict[Path, dict] = {}
    for inst, body in instances.items():
        stype, impls = next(iter(body.items()))
        impl, cfg = next(iter(impls.items()))
        d = root / stype / impl
        (d / "configs").mkdir(parents=True, exist_ok=True)
        (d / "app.py").write_text((apps or {}).get(impl, FIXTURE_APP))
        (d / "requirements.txt").write_text("# stdlib only\n")
        by_dir.setdefault(d / "configs" / f"{impl}.yaml", {})[inst] = {stype: {impl: {"entrypoint": "app.py", **cfg}}}
    if any("responses_api_agents" in body for body in instances.values()):
        relay = root / "environment_servers" / "legacy_agent"
        relay.mkdir(parents=True, exist_ok=True)
        (relay / "app.py").write_text(FIXTURE_RELAY_APP)
        (relay / "requirements.txt").write_text("# stdlib only\n")
    paths = []
    for path, data in by_dir.items():
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        paths.append(path.relative_to(root).as_posix())
    manifest = {"format": "native-v1", "config_paths": paths, "metadata": {"name": name}}
    (root / "nemo-environment.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return root


# A server's declaration that it uses Ray, the way NeMo Gym 0.7 servers make it: ``ray_enabled = True``
# on the class whose ``run_webserver()`` the entrypoint calls (read statically by the daemon,
# gym_runtime/package/server_class.py; the fixture's own code runs after it).
RAY_DECLARATION = """class FixtureServer:
    ray_enabled = True

    @classmethod
    def run_webserver(cls):
        pass


FixtureServer.run_webserver()
"""


def declaring_ray(app: str) -> str:
    """``app`` whose entrypoint declares that it uses Ray (:data:`RAY_DECLARATION`)."""
    return RAY_DECLARATION + app


# the relay the 0.7 line (the default) generates in front of simple_env's agent, and every server it runs
SIMPLE_RELAY = "acme_agent_environment_server"
SIMPLE_SERVERS = frozenset({"acme_math", "acme_agent", SIMPLE_RELAY})


def simple_env(root: Path, ray: bool = False, **resource_cfg: object) -> Path:
    """A resources server ``acme_math`` plus an agent ``acme_agent`` referring to it (under the 0.7
    line also the relay :data:`SIMPLE_RELAY` in front of the agent: :data:`SIMPLE_SERVERS`); with
    ``ray``, ``acme_math`` declares that it uses Ray."""
    return write_fixture_package(
        root,
        {
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math", **resource_cfg}}},
            "acme_agent": {
                "responses_api_agents": {
                    "acme_agent": {"resources_server": {"type": "resources_servers", "name": "acme_math"}}
                }
            },
        },
        apps={"acme_math": declaring_ray(FIXTURE_APP)} if ray else None,
    )


# A server whose helper outlives its parent: ``sh`` exits at once and the ``sleep`` it started is an
# orphan in the server's process group (killed with the group when the daemon stops the server).
ORPHANING_APP = "import subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 600 &'])\n" + FIXTURE_APP


def orphaning_env(root: Path) -> Path:
    """A one-server package (``acme_orphans``) whose server leaves one orphaned process per start:
    at isolation partial or none it is reparented to the nearest subreaper or PID 1, which must reap
    it once the daemon has stopped the server's process group."""
    return write_fixture_package(
        root,
        {"acme_orphans": {"resources_servers": {"acme_orphans": {"domain": "other"}}}},
        apps={"acme_orphans": ORPHANING_APP},
        name="acme-orphans",
    )


def up_process(pkg: Path, tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``gym-runtime up PKG ...`` as a real subprocess (own session), stdout/stderr piped."""
    e = {**os.environ, **(env or {})}
    overrides = [a for a in args if "=" in a and not a.startswith("-")]  # KEY=VALUE right after PKG
    flags = [a for a in args if a not in overrides]
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gym_runtime.cli.main",
            "up",
            str(pkg),
            *overrides,
            "--work-dir",
            str(tmp / "run"),
            *flags,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=e,
        start_new_session=True,
    )


def read_ready_line(proc: subprocess.Popen, timeout: float = 120.0) -> str:
    """The first stdout line of ``up`` (the ready JSON); raises AssertionError with stderr on exit."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout):
        proc.kill()
        raise AssertionError("no ready line in time; stderr:\n" + proc.stderr.read())
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        raise AssertionError(f"up exited {proc.returncode} without a ready line; stderr:\n" + proc.stderr.read())
    return line


def ready_then_stop(proc: subprocess.Popen, timeout: float = 600.0, stop_s: float = 60.0) -> tuple[dict, str]:
    """Wait for ``up``'s ready line, then SIGTERM it and assert exit 0 within ``stop_s``: (the ready
    JSON, its stderr). The process tree is killed whatever happens."""
    try:
        info = json.loads(read_ready_line(proc, timeout=timeout))
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(stop_s) == 0
        return info, proc.stderr.read()
    finally:
        kill_tree(proc)


def wait_log_lines(head: str, name: str, text: str, count: int = 1, timeout: float = 60.0) -> list[str]:
    """Poll the head server's ``/servers/{name}/logs`` until ``count`` lines contain ``text``; those lines
    (AssertionError after ``timeout`` s). A condition to wait for instead of a guessed delay."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        out = httpx.get(f"{head}/servers/{name}/logs", params={"tail": 1000}, timeout=30, trust_env=False).json()
        lines = [ln for ln in (out.get("lines") or []) if text in ln]
        if len(lines) >= count:
            return lines
        assert time.monotonic() < deadline, f"{name}'s log has {len(lines)} of {count} lines with {text!r}: {out}"
        time.sleep(0.05)


def descendants(pid: int) -> list[psutil.Process]:
    """Every live descendant of ``pid`` (empty when it is gone)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def cmdline(p: psutil.Process | int) -> list[str]:
    """The command line of process (or pid) ``p``, empty once it has exited (a snapshot of a tree
    outlives short-lived members such as Ray's workers)."""
    try:
        return (psutil.Process(p) if isinstance(p, int) else p).cmdline()
    except psutil.Error:
        return []


def alive(pids: list[int]) -> list[int]:
    """The pids of ``pids`` still running (zombies count as gone only once reaped)."""
    out = []
    for p in pids:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(p).is_running():
                out.append(p)
    return out


def running(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie, or a pid that vanishes while psutil reads ``/proc``, does not."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, OSError):  # psutil can let FileNotFoundError through when /proc/<pid> goes
        return False


def wait_gone(pids: list[int], timeout: float = 5.0, zombies_count: bool = True) -> list[int]:
    """Wait until none of ``pids`` exists (``zombies_count=False``: until none runs, a zombie
    someone else has yet to reap counting as gone); returns the survivors."""
    deadline = time.monotonic() + timeout
    left_of = alive if zombies_count else (lambda ps: [p for p in ps if running(p)])
    while (left := left_of(pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def kill_tree(proc: subprocess.Popen) -> None:
    """Cleanup for a failed test: SIGKILL the daemon's whole session."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(5)


def slow_build_package(root: Path) -> Path:
    """:func:`simple_env` whose resources server requires ``slowpkg``: with the index of
    :func:`interrupt_during_slow_build` its venv build hangs until the process is signalled."""
    pkg = simple_env(root)
    (pkg / "resources_servers/acme_math/requirements.txt").write_text("slowpkg\n")
    return pkg


def interrupt_during_slow_build(tmp: Path, argv: list[str], sig: int) -> tuple[int, str, str, list[int]]:
    """Run ``gym-runtime *argv`` (own session) against a loopback index that answers ``slowpkg``'s
    file after 30 s; once the build asks for it, send ``sig`` (SIGINT to the process group, as a
    terminal's Ctrl-C does; other signals to the process). Returns ``(exit code, stdout, stderr,
    pids of its descendants at the moment of the signal)``."""
    from tests.helpers.index import SimpleIndex
    from tests.helpers.wheels import build_wheel

    build_wheel(tmp / "files", "slowpkg", "1.0")
    with SimpleIndex(tmp / "files", delay_s=30) as idx:
        env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
        env.update(
            {
                "UV_INDEX_URL": idx.url,
                "GYM_RUNTIME_HOME": str(tmp / "home"),
                "GYM_RUNTIME_UV_CACHE_DIR": str(tmp / "uv-cache"),
                "GYM_RUNTIME_PIN_MODE": "none",
            }
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "gym_runtime.cli.main", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not any(r.startswith("/files/") for r in idx.requests):
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
                time.sleep(0.05)
            kids = [p.pid for p in descendants(proc.pid)]
            os.killpg(proc.pid, sig) if sig == signal.SIGINT else proc.send_signal(sig)
            out, err = proc.communicate(timeout=20)
        finally:
            kill_tree(proc)
    return proc.returncode, out, err, kids
