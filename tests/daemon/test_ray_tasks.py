"""Ray tasks of a server tree import the tree's own modules and run in the tree's venv, at every
isolation level, and Ray-using servers stop before the Ray head they use, their drivers exiting
without Ray's fixed 0.5 s sleep (``gym_runtime/venvs/exit_hook.py``).

The kind: Gym trees submit ``@ray.remote`` functions defined in their own modules (code_gen's
``lcb_integration``, scicode's ``scicode_integration``); the worker that runs one is started by
the raylet, so it must see the submitting server's tree, venv and ``PYTHONPATH``
(``gym_runtime/ray/workers.py``). Two fixture servers with real Ray (venvs built by real
uv from the uv cache, offline when the cache holds Ray 2.60.0 for Python 3.12) each run two tasks
defined in ``tree_tasks/remote.py`` of their own tree: ``plain`` (no runtime env, like scicode's)
and ``pinned`` (``py_executable`` + ``PYTHONPATH``, like code_gen's). The second server's venv
alone has ``six``, which its tasks import: they must run in its venv, not in the venv the Ray head
was started from (the first server's). The real code_gen tree is in ``test_real_gym_trees.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.daemon import (
    JSON_HANDLER,
    declaring_ray,
    descendants,
    kill_tree,
    read_ready_line,
    up_process,
    wait_gone,
    write_fixture_package,
)
from tests.helpers.gym_package import python_312_plus
from tests.helpers.registry import registry_reachable

pytestmark = pytest.mark.slow
RAY = "ray==2.60.0"

RAY_TREE_APP = (
    r"""# test fixture: a Gym-shaped server whose /run runs Ray tasks of its own tree
import atexit, json, os, sys
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
import ray, yaml

name = os.environ["NEMO_GYM_CONFIG_PATH"]
cfg = yaml.safe_load(os.environ["NEMO_GYM_CONFIG_DICT"])
inner = next(iter(next(iter(cfg[name].values())).values()))
if inner.get("fixture_without_exit_hook"):  # the control: Ray's own exit, with its 0.5 s sleep
    os.environ.pop("RAY_RUNTIME_ENV_HOOK")
ray.init(address=cfg["ray_head_node_address"], ignore_reinit_error=True)  # as Gym's initialize_ray

def watch_exit_sleeps():  # registered last, so it runs first at exit: shows any sleep of Ray's exit
    import time
    real = time.sleep
    def sleep(seconds):
        print("exit sleep", seconds, flush=True)
        real(seconds)
    time.sleep = sleep
    print("server atexit handler ran", flush=True)
atexit.register(watch_exit_sleeps)
from tree_tasks.remote import pinned, plain  # the tree's own module

"""
    + JSON_HANDLER
    + r"""
class H(JSONHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        need = inner.get("fixture_needs", "")
        try:
            got = {"plain": ray.get(plain.remote(need), timeout=240), "pinned": ray.get(pinned.remote(need), timeout=240)}
        except Exception as e:
            return self._send(500, {"detail": repr(e)})
        ok = all(r["answer"] == 42 for r in got.values())
        self._send(200, {"reward": 1.0 if ok else 0.0, **got,
                         "server": {"prefix": sys.prefix, "pythonpath": os.environ["PYTHONPATH"]}})

print("fixture", name, "listening on", inner["host"], inner["port"], flush=True)
ThreadingHTTPServer((inner["host"], int(inner["port"])), H).serve_forever()
"""
)

REMOTE_PY = """import importlib, os, sys
import ray
from tree_tasks import scoring

TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def facts(need):
    if need:
        importlib.import_module(need)  # only in this server's venv
    return {"answer": scoring.answer(), "prefix": sys.prefix, "pythonpath": os.environ.get("PYTHONPATH"),
            "module": scoring.__file__}


@ray.remote
def plain(need):
    return facts(need)


@ray.remote(runtime_env={"py_executable": sys.executable, "env_vars": {"PYTHONPATH": TREE}})
def pinned(need):
    return facts(need)
"""


def ray_tree_package(root: Path) -> Path:
    """Agents ``ray_a`` (venv: Ray) and ``ray_b`` (venv: Ray + six, which its tasks import; its
    driver drops the exit hook before ``ray.init``, the control for Ray's exit sleep)."""
    pkg = write_fixture_package(
        root,
        {
            "ray_a": {"responses_api_agents": {"ray_tree_a": {}}},
            "ray_b": {
                "responses_api_agents": {"ray_tree_b": {"fixture_needs": "six", "fixture_without_exit_hook": True}}
            },
        },
        apps={"ray_tree_a": declaring_ray(RAY_TREE_APP), "ray_tree_b": declaring_ray(RAY_TREE_APP)},
        name="ray-tree-env",
    )
    for impl, reqs in (("ray_tree_a", RAY), ("ray_tree_b", f"{RAY}\nsix")):
        tree = pkg / "responses_api_agents" / impl
        (tree / "requirements.txt").write_text(reqs + "\n")
        (tree / "tree_tasks").mkdir()
        (tree / "tree_tasks" / "__init__.py").write_text("")
        (tree / "tree_tasks" / "scoring.py").write_text("def answer():\n    return 42\n")
        (tree / "tree_tasks" / "remote.py").write_text(REMOTE_PY)
    return pkg


@pytest.fixture(scope="module")
def ray_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """``(python, env)`` for ``up``: Python 3.12, venvs shared by this module's runs, uv offline when
    its cache can install Ray 2.60.0 for 3.12 without the network (else online, else skip)."""
    python = python_312_plus()
    if python is None:
        pytest.skip("no Python 3.12+ under pyenv")
    tmp = tmp_path_factory.mktemp("ray-venvs")
    env = {"GYM_RUNTIME_PIN_MODE": "none", "GYM_RUNTIME_VENV_DIR": str(tmp / "venvs")}
    uv = [str(Path(sys.executable).with_name("uv"))]
    subprocess.run([*uv, "venv", "-q", "-p", python, str(tmp / "probe")], check=True, timeout=120)
    probe = subprocess.run(
        [*uv, "pip", "install", "--dry-run", "--offline", "-p", str(tmp / "probe/bin/python"), RAY, "six"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if probe.returncode == 0:
        env["UV_OFFLINE"] = "1"
    elif not registry_reachable():
        pytest.skip("the uv cache cannot install ray 2.60.0 for Python 3.12 offline and PyPI is unreachable")
    return python, env


def _rollouts(head: str) -> list[dict]:
    rows = [
        {"responses_create_params": {"input": "go"}, "agent_ref": {"type": "responses_api_agents", "name": n}}
        for n in ("ray_a", "ray_b")
    ]
    r = httpx.post(head + "/rollouts/run", json={"examples": rows}, timeout=600, trust_env=False)
    return json.loads(r.text)["results"]


@pytest.mark.parametrize("isolation", [None, "none"], ids=["best", "none"])
def test_ray_tasks_see_the_submitting_servers_tree_venv_and_pythonpath(
    ray_env, tmp_path: Path, isolation: str | None
) -> None:
    from sandbox import probe_isolation

    python, env = ray_env
    pkg = ray_tree_package(tmp_path / "pkg")
    # a grace long enough for a Ray driver's exit on a loaded host (ray.shutdown at interpreter exit
    # takes seconds), short enough that a driver hanging without its head is still "ignored SIGTERM"
    args = ["--python", python, "--shutdown-grace", "15", *(["--isolation", isolation] if isolation else [])]
    proc = up_process(pkg, tmp_path, *args, env=env)
    try:
        info = json.loads(read_ready_line(proc, timeout=600))
        want = isolation or ("partial" if probe_isolation().level.value in ("full", "partial") else "none")
        assert info["isolation"] == want and info["ray"]["mode"] == "local"
        results = _rollouts(info["head_server"])
        for name, res in zip(("ray_a", "ray_b"), results, strict=True):
            assert "error" not in res, res
            assert res["reward"] == 1.0, res
            tree = pkg / "responses_api_agents" / f"ray_tree_{name[-1]}"
            if isolation == "none":  # without bubblewrap the server runs from a private copy of its tree in the run
                tree = Path(res["server"]["pythonpath"])
                assert tree.parts[-2:] == ("responses_api_agents", f"ray_tree_{name[-1]}"), res
                assert (tmp_path / "run") in tree.parents, res
            for kind in ("plain", "pinned"):
                assert res[kind]["prefix"] == res["server"]["prefix"], (name, kind, res)  # the server's venv
                assert res[kind]["pythonpath"] == res["server"]["pythonpath"] == str(tree)
                assert res[kind]["module"] == str(tree / "tree_tasks" / "scoring.py")
        assert results[0]["server"]["prefix"] != results[1]["server"]["prefix"]  # two venvs, one Ray head
        tree_pids = [p.pid for p in descendants(proc.pid)]
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0
        took = time.monotonic() - t0
        err = proc.stderr.read()
        assert "ignored SIGTERM" not in err, err[-3000:]  # servers stop before the Ray head they use
        assert took < 40, err[-3000:]  # a hang detector, not a speed target
        assert wait_gone(tree_pids, 10.0) == []
        # the driver's exit skips Ray's fixed 0.5 s sleep (gym_runtime/venvs/exit_hook.py); the
        # server's own atexit handler still runs; without the hook Ray's exit sleeps
        logs = {n: (tmp_path / "run" / "logs" / f"{n}.log").read_text() for n in ("ray_a", "ray_b")}
        assert all("server atexit handler ran" in text for text in logs.values()), logs
        assert "exit sleep 0.5" not in logs["ray_a"], logs["ray_a"][-3000:]
        assert "exit sleep 0.5" in logs["ray_b"], logs["ray_b"][-3000:]
    finally:
        kill_tree(proc)
