"""How the opensandbox backend groups servers into sandboxes (sandbox/opensandbox/groups.py), and its
launcher and preloaded parent run as real processes on this host, as execd runs them in a sandbox
(each command a session of its own): the server forked by the parent gets its private variables
(never in an environment another process can read), its own log and exit status; SIGTERM to the
launcher reaches it; a launcher killed takes its server with it; one over its memory limit is
ended; without a parent the launcher starts the server itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gym_runtime.ray import own as own_ray
from sandbox.launch import ProcessSpec
from sandbox.limits import ResourceLimits
from sandbox.opensandbox.groups import OWN_RAY_MARK, PARENT, group_cpu, group_key, group_spec, launched
from sandbox.zygote import Preload

# a server: says what it got, then sleeps (argv[1] "sleep"; "grow": holding 200 MiB) or exits 3
APP = """
import gc, json, os, sys, time
me = open(f"/proc/{os.getpid()}/comm").read().strip()
seen = open(f"/proc/{os.getpid()}/environ", "rb").read()
print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "secret": os.environ.get("SECRET"), "comm": me,
                  "in_environ": b"SECRET=" in seen, "json_preloaded": "email.mime.text" in sys.modules,
                  "frozen": gc.get_freeze_count()}), flush=True)
if sys.argv[1:] == ["grow"]:
    held = bytearray(200 << 20)  # touched: 200 MiB of RSS
if sys.argv[1:] in (["sleep"], ["grow"]):
    time.sleep(60)
sys.exit(3)
"""


def _spec(tmp: Path, name: str, *args: str, python: str = sys.executable, **kw) -> ProcessSpec:
    return ProcessSpec(
        name=name, argv=[python, str(tmp / "app.py"), *args], cwd=tmp, env={}, private_env={"SECRET": "s"}, **kw
    )


def _launch(spec: ProcessSpec, parent: str | None, secret: str) -> subprocess.Popen:
    env = {"PATH": os.environ["PATH"], "SECRET": secret}  # execd's envs: public and private alike
    return subprocess.Popen(
        launched(spec, parent),
        env=env,
        cwd=spec.cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_groups_are_venvs_and_a_server_with_its_own_ray_is_alone(tmp_path: Path) -> None:
    pre = Preload(("json", "ray"), withheld=("MARK",))
    a = ProcessSpec(
        "a", ["/v1/bin/python", "a.py"], "/t/a", {"MARK": "1", "X": "1"}, limits=ResourceLimits(512), preload=pre
    )
    b = ProcessSpec("b", ["/v1/bin/python", "b.py"], "/t/b", {}, limits=ResourceLimits(256), ports=[9], preload=pre)
    ray = ProcessSpec("r", ["/v1/bin/python", "r.py"], "/t/r", own_ray.server_env(), preload=pre)
    assert OWN_RAY_MARK in own_ray.server_env()  # what a server that starts its own Ray has, and it alone
    assert group_key(a) == group_key(b) == "venv:/v1" and group_key(ray) == "server:r"
    g = group_spec([a, b])
    assert g.members == ("a", "b") and g.name == "a+1" and g.limits.memory_mb == 768 and g.ports == (9,)
    # the parent imports no Ray: a server that uses it is in a sandbox of its own; it gets no withheld variable
    assert set(g.read_only_paths) >= {"/t/a", "/t/b"} and g.preload == ("json",) and g.parent_env == {"X": "1"}
    assert group_spec([a]).preload is None  # one server: no parent
    assert group_spec([a, ProcessSpec("c", ["/v1/bin/python"], "/", {})]).limits.memory_mb is None  # one unlimited
    assert group_cpu("1", 3) == "3" and group_cpu("0.5", 3) == "1.5" and group_cpu("500m", 2) == "1000m"


@pytest.fixture
def parent(tmp_path: Path):
    (tmp_path / "app.py").write_text(APP)
    sock = str(tmp_path / "parent.sock")
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT, sock, json.dumps(["email.mime.text", "no_such_module_here"])],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    first = proc.stdout.readline()  # what it imported, and the objects it made immortal (none before 3.12)
    assert first.startswith("preloaded parent: 2 module(s) imported, ") and "objects made immortal" in first, first
    yield sock
    proc.kill()
    proc.wait()


def test_a_server_forked_by_the_parent_gets_its_secret_alone_and_its_exit(tmp_path: Path, parent: str) -> None:
    p = _launch(_spec(tmp_path, "alpha_server_long_name"), parent, "s3")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 3, err
    seen = json.loads(out)
    assert seen["secret"] == "s3" and not seen["in_environ"] and seen["json_preloaded"], seen
    assert seen["frozen"] > 0  # what the parent imported is frozen: the server's collections leave its pages shared
    assert seen["comm"] == "alpha_server_lo" and seen["argv"] == [str(tmp_path / "app.py")]
    assert seen["path0"] == str(tmp_path)


def test_sigterm_reaches_the_server_and_a_killed_launcher_takes_it_along(tmp_path: Path, parent: str) -> None:
    p = _launch(_spec(tmp_path, "beta", "sleep"), parent, "s4")
    assert json.loads(p.stdout.readline())["secret"] == "s4"
    os.killpg(p.pid, signal.SIGTERM)  # execd's interrupt: the launcher's process group
    assert p.wait(30) == 128 + signal.SIGTERM

    q = _launch(_spec(tmp_path, "gamma", "sleep"), parent, "s5")
    json.loads(q.stdout.readline())
    server = next(c for c in psutil.process_iter(["name"]) if c.info["name"] == "gamma")
    os.killpg(q.pid, signal.SIGKILL)
    q.wait(30)
    deadline = time.monotonic() + 30
    while server.is_running() and server.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the server outlived its launcher"
        time.sleep(0.05)


def test_a_server_over_its_memory_limit_is_ended_alone_and_says_so(tmp_path: Path, parent: str) -> None:
    p = _launch(_spec(tmp_path, "epsilon", "grow", limits=ResourceLimits(memory_mb=64)), parent, "s7")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 250, err  # LIMIT_EXITS: memory-limit
    assert "gym-runtime: server over its memory limit" in err and "MiB of RSS" in err, err


def test_without_a_parent_the_launcher_starts_the_server_itself(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    p = _launch(_spec(tmp_path, "delta"), None, "s6")
    out, err = p.communicate(timeout=60)
    seen = json.loads(out)
    assert p.returncode == 3 and seen["secret"] == "s6" and not seen["in_environ"] and seen["comm"] == "delta", err


def test_past_the_outage_deadline_the_detail_names_every_server_of_the_lost_sandbox(tmp_path: Path) -> None:
    from sandbox.opensandbox.connection import OpenSandboxConnection
    from sandbox.opensandbox.environment import OpenSandboxEnvironment
    from sandbox.opensandbox.service import SandboxService
    from sandbox.opensandbox.spec import RunLabels
    from sandbox.policy import EgressPolicy

    conn = OpenSandboxConnection("127.0.0.1:9", daemon_host="127.0.0.1", egress="unenforced", outage_s=0.0)
    env = OpenSandboxEnvironment(SandboxService(conn), RunLabels.new(tmp_path, "h"), EgressPolicy(), tmp_path)
    a, b = _spec(tmp_path, "arithmetic"), _spec(tmp_path, "arithmetic_agent")
    alone = ProcessSpec("r", ["/v2/bin/python", "r.py"], tmp_path, own_ray.server_env())
    env.groups.plan([a, b, alone])
    assert env.groups.members_of(b) == ("arithmetic", "arithmetic_agent") and env.groups.members_of(alone) == ("r",)
    # whichever server of the group noticed first fails the run: the detail names the whole group
    reason, detail = env.outage("no answer", b)
    assert reason == "service-gone" and detail.startswith("OpenSandbox server unreachable since "), detail
    assert detail.endswith(
        "; the sandbox lost is the one the 2 servers of its venv share (arithmetic, arithmetic_agent)"
    ), detail
    assert "share" not in env.outage("no answer", alone)[1]  # a sandbox of its own


def test_the_sandbox_memory_helper_counts_the_parent_as_the_parent(tmp_path: Path) -> None:
    # the parent's code (``python -c CODE SOCKET``) names execd in its text: it is still the parent
    from sandbox.opensandbox.groups import PARENT_SOCKET
    from tests.helpers.opensandbox.runs import _role

    code = "import time  # forks what execd's launcher asks for\ntime.sleep(30)"
    p = subprocess.Popen([sys.executable, "-c", code, PARENT_SOCKET, "[]"])
    try:
        deadline = time.monotonic() + 30
        while len(psutil.Process(p.pid).cmdline()) < 4:  # the exec done
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert _role(psutil.Process(p.pid)) == "parent"
    finally:
        p.kill()
        p.wait()
