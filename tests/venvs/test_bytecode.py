"""The venv's bytecode cache: learned from what a process imports, compiled only by the daemon from
the venv's own sources, never writable by a server, and still a verified venv."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gym_runtime.venvs import build_venvs, plan_venvs
from gym_runtime.venvs.bytecode import compile_into_shared, for_user, harvest, learned, sources, stale
from gym_runtime.venvs.env_bytecode import EnvironmentBytecode
from gym_runtime.venvs.store import is_ready
from tests.helpers.index import write_simple_index
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import merged_config, synthetic_pkg

KEY = "resources_servers/acme /pkg/resources_servers/acme"
# What a hostile process does in its learning dir: a pyc for tinyparse whose code is its own (with
# the header of the real source, so Python would load it), and names of files outside the venv.
PLANT = r"""
import importlib.util, importlib._bootstrap_external as be, os, sys
prefix, outside = sys.argv[1], sys.argv[2]
import tinyparse
src = tinyparse.__file__
cfile = importlib.util.cache_from_source(src)
assert cfile.startswith(prefix), cfile
st = os.stat(src)
code = compile("print('PLANTED')", src, "exec")
with open(cfile, "wb") as f:
    f.write(be._code_to_timestamp_pyc(code, st.st_mtime, st.st_size))
for victim in (outside, os.path.join(os.path.dirname(prefix), "x.py")):
    d = prefix + os.path.dirname(victim)
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, os.path.basename(victim)[:-3] + ".cpython-312.pyc"), "wb").write(b"junk")
"""


@pytest.fixture
def venv_python(tmp_path: Path, make_settings) -> Path:
    build_wheel(tmp_path / "files", "tinyparse", "0.3.0", files={"tinyparse/extra.py": "X = 1\n"})
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme": ("resources_servers", "tinyparse==0.3.0\n")})
    settings = make_settings(write_simple_index(tmp_path / "files", tmp_path / "idx"))
    return build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("acme").python


def _py(python: Path, cache_env: dict[str, str], *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", **cache_env}
    return subprocess.run([str(python), *args], env=env, capture_output=True, text=True, check=True).stdout


def _pycache(venv: Path, package: str) -> Path:
    return next(venv.glob(f"lib/python3.*/site-packages/{package}")) / "__pycache__"


def test_a_venv_is_built_without_bytecode(venv_python: Path) -> None:
    venv = venv_python.parent.parent
    assert not list(venv.rglob("*.pyc")), "builds compile nothing; the shared cache is learned"
    assert learned(venv) == set()


def test_learned_imports_are_compiled_by_the_daemon_never_copied(venv_python: Path, tmp_path: Path) -> None:
    venv = venv_python.parent.parent
    cache = for_user(venv, KEY)
    assert cache.learning and cache.writable == [cache.prefix] and cache.prefix.is_relative_to(venv)
    outside = tmp_path / "outside.py"
    outside.write_text("SECRET = 1\n")
    learn_dir = cache.prefix
    _py(venv_python, cache.env, "-c", PLANT, str(learn_dir), str(outside))
    # the plant works for the process that wrote it (its own cache)...
    assert _py(venv_python, cache.env, "-c", "import tinyparse").strip() == "PLANTED"

    n = asyncio.run(harvest(venv_python, [cache]))
    assert n == 1  # tinyparse/__init__.py only: the outside file and .gym-runtime files are not compiled
    assert [p.name for p in _pycache(venv, "tinyparse").iterdir()] == [f"__init__.{sys.implementation.cache_tag}.pyc"]
    assert not (tmp_path / "__pycache__").exists() and not list((venv / ".gym-runtime").rglob("*.pyc"))
    # ...but never for anyone else: the shared cache holds the daemon's compile of the real source
    again = for_user(venv, KEY)
    assert not again.learning and again.writable == [] and again.env == {"PYTHONDONTWRITEBYTECODE": "1"}
    assert _py(venv_python, again.env, "-c", "import tinyparse; print(tinyparse.__version__)").strip() == "0.3.0"
    assert learned(venv) == {KEY} and not learn_dir.exists()
    assert is_ready(venv, json.loads((venv / ".gym-runtime-ready").read_text())["digest"])  # still a ready venv


def test_a_learning_dir_left_by_a_dead_daemon_is_harvested_at_the_next_start(venv_python: Path) -> None:
    venv = venv_python.parent.parent
    held = for_user(venv, "responses_api_agents/other /pkg/x")
    dead = for_user(venv, KEY)
    _py(venv_python, dead.env, "-c", "import tinyparse.extra")
    assert stale(venv) == []  # both are held by this (live) daemon
    dead.release()  # what the kernel does when its daemon dies
    said: list[str] = []
    asyncio.run(EnvironmentBytecode(said.append).prepare([venv_python]))  # what a start does first
    assert said == [
        f"bytecode: compiled what an earlier run's processes imported into venv {venv.name} (2 files; "
        "that run stopped before compiling them); later starts load it instead of compiling"
    ]
    assert learned(venv) == {KEY}
    assert held.prefix.is_dir(), "a dir a live daemon holds is left alone"
    held.release()


def test_a_sandboxed_process_writes_only_its_own_learning_dir(venv_python: Path, tmp_path: Path) -> None:
    from sandbox import IsolationLevel, ProcessSpec, Sandbox, probe_isolation
    from sandbox.policy import EgressPolicy

    if probe_isolation().level == IsolationLevel.NONE or not probe_isolation().details.get("bwrap"):
        pytest.skip("needs bubblewrap (isolation full or partial)")
    venv = venv_python.parent.parent
    mine, other = for_user(venv, KEY), for_user(venv, "responses_api_agents/other /pkg/x")
    _pycache(venv, "tinyparse").mkdir()
    probe = (
        "import os, sys, json\nout = {}\nfor p in sys.argv[1:]:\n"
        "    try:\n        open(os.path.join(p, 'w.pyc'), 'wb').write(b'x'); out[p] = 'written'\n"
        "    except OSError as e:\n        out[p] = type(e).__name__\nprint(json.dumps(out))\n"
    )
    targets = [str(mine.prefix), str(other.prefix), str(_pycache(venv, "tinyparse"))]

    async def run() -> dict:
        sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / "sb")
        try:
            r, w = os.pipe()
            proc = sb.spawn(
                ProcessSpec(
                    "acme",
                    [str(venv_python), "-c", probe, *targets],
                    tmp_path,
                    {"PATH": "/usr/bin:/bin", **mine.env},
                    read_only_paths=[venv],
                    writable_paths=mine.writable,
                    stdout_fd=w,
                )
            )
            os.close(w)
            await asyncio.wait_for(proc.wait(), 60)
            return json.loads(os.read(r, 65536))
        finally:
            await sb.close()

    seen = asyncio.run(run())
    assert seen == {targets[0]: "written", targets[1]: "OSError", targets[2]: "OSError"}, seen
    mine.release()
    other.release()


def test_a_venv_where_no_learning_dir_can_be_made_runs_without_learning(venv_python: Path) -> None:
    venv = venv_python.parent.parent
    (venv / ".gym-runtime" / "learn").write_text("not a directory")  # as a read-only venv root fails mkdir
    cache = for_user(venv, KEY)
    assert not cache.learning and cache.writable == [] and cache.env == {"PYTHONDONTWRITEBYTECODE": "1"}


def test_imports_are_compiled_while_the_process_still_starts(venv_python: Path) -> None:

    venv = venv_python.parent.parent
    state = {"ready": False}

    async def run() -> tuple[bool, set[str]]:
        env = EnvironmentBytecode()
        cache = env.user(venv_python, KEY, "acme")
        _py(venv_python, cache.env, "-c", "import tinyparse")  # the process's start-up imports
        env.learn(lambda name: state["ready"])
        for _ in range(100):  # compiled before the process says it is ready...
            await asyncio.sleep(0.1)
            if (_pycache(venv, "tinyparse")).is_dir():
                break
        early = (_pycache(venv, "tinyparse")).is_dir() and KEY not in learned(venv)
        state["ready"] = True
        for _ in range(100):  # ...and the user is recorded once it is
            await asyncio.sleep(0.1)
            if KEY in learned(venv):
                break
        await env.close()
        return early, learned(venv)

    early, users = asyncio.run(run())
    assert early, "what a starting process imported is compiled while it starts"
    assert users == {KEY}


def test_a_reporting_user_writes_nothing_and_only_its_venv_sources_are_compiled(
    venv_python: Path, tmp_path: Path
) -> None:
    # the preloaded parent's way (sandbox/_zygote.py): it reads the shared cache and lists what it
    # imported; the list is names only, filtered like a learning dir's
    venv = venv_python.parent.parent
    cache = for_user(venv, KEY, report=True)
    assert cache.learning and cache.env == {"PYTHONDONTWRITEBYTECODE": "1"} and cache.writable == [cache.prefix]
    assert cache.report_file == cache.prefix / "imported.txt"
    listed = _py(
        venv_python,
        cache.env,
        "-c",
        "import tinyparse.extra, json, sys; "
        "print('\\n'.join(m.__file__ for m in (sys.modules['tinyparse.extra'], json)))",
    ).split()
    assert not list(venv.rglob("*.pyc")) and not list(cache.prefix.rglob("*.pyc"))  # it wrote no bytecode
    outside = tmp_path / "outside.py"
    outside.write_text("SECRET = 1\n")
    private = venv / ".gym-runtime" / "x.py"
    private.write_text("X = 1\n")
    cache.report_file.write_text(
        "\0".join([*listed, str(outside), str(private), "relative/x.py", "/etc/passwd"]) + "\0"
    )

    n = asyncio.run(harvest(venv_python, [cache]))
    assert n == 1  # tinyparse/extra.py: json is the interpreter's, the rest is not a venv source
    assert [p.name for p in _pycache(venv, "tinyparse").iterdir()] == [f"extra.{sys.implementation.cache_tag}.pyc"]
    assert not (tmp_path / "__pycache__").exists() and not list((venv / ".gym-runtime").rglob("*.pyc"))
    assert learned(venv) == {KEY} and cache.prefix is None


def test_a_learning_user_is_offered_a_report_file_that_a_forked_server_can_take(venv_python: Path) -> None:
    # a server forked from a parent that reads the shared cache lists what it compiled there
    # (sandbox/_zygote.py reads the same variable; tests/sandbox/test_preloaded_parents.py runs it)
    from gym_runtime.venvs.bytecode import REPORT_VAR
    from sandbox import _zygote

    venv = venv_python.parent.parent
    cache = for_user(venv, KEY)
    assert cache.env == {"PYTHONPYCACHEPREFIX": str(cache.prefix), REPORT_VAR: str(cache.prefix / "imported.txt")}
    assert _zygote.REPORT_VAR == REPORT_VAR
    (cache.prefix / "imported.txt").write_text(
        _pycache(venv, "tinyparse").parent.joinpath("extra.py").as_posix() + "\0"
    )
    assert asyncio.run(harvest(venv_python, [cache])) == 1 and learned(venv) == {KEY}


def test_a_venv_with_nothing_recorded_gets_the_seed_compiled_beside_its_processes(venv_python: Path) -> None:
    from gym_runtime.venvs.bytecode import RAY_HEAD

    venv = venv_python.parent.parent
    said: list[str] = []
    bc = EnvironmentBytecode(said.append)
    seed = (
        "tinyparse/__init__.py",
        "tinyparse/extra.py",
        "not_installed/mod.py",
        "../../../../etc/passwd.py",
        "/etc/passwd.py",
        "tinyparse/README",
    )

    async def start() -> tuple[bool, bool, bool, bool]:
        bc.plan_seed([venv_python], seed)
        head = bc.user(venv_python, RAY_HEAD, "ray_head")  # made before the seed: it reads the shared cache
        server = bc.user(venv_python, KEY, "acme")  # a server still learns what the seed lacks
        bc.start_seed()
        compiling = not said and learned(venv) == set()  # the compile runs beside, nothing awaited it
        done = await bc.settled(60)
        return compiling, head.learning, server.learning, done

    compiling, head_learns, server_learns, done = asyncio.run(start())
    assert compiling and not head_learns and server_learns and not done  # the server has not been harvested
    assert len(said) == 1 and said[0].startswith(
        f"bytecode: compiled 2 sources the release's processes import at start-up into venv {venv.name} in "
    ), said
    assert "beside its processes' start" in said[0]
    tag = sys.implementation.cache_tag
    assert sorted(p.name for p in _pycache(venv, "tinyparse").iterdir()) == [f"__init__.{tag}.pyc", f"extra.{tag}.pyc"]
    assert learned(venv) == {RAY_HEAD}  # recorded once the seed holding what it imports is compiled


def test_a_venv_with_a_learned_user_is_not_seeded(venv_python: Path) -> None:
    venv = venv_python.parent.parent
    cache = for_user(venv, KEY)
    _py(venv_python, cache.env, "-c", "import tinyparse")
    asyncio.run(harvest(venv_python, [cache]))
    said: list[str] = []
    bc = EnvironmentBytecode(said.append)

    async def seed() -> None:
        bc.plan_seed([venv_python], ("tinyparse/extra.py",))
        bc.start_seed()
        await bc.settled(60)

    asyncio.run(seed())
    assert said == [] and [p.name for p in _pycache(venv, "tinyparse").iterdir()] == [
        f"__init__.{sys.implementation.cache_tag}.pyc"
    ]
    assert learned(venv) == {KEY}


def test_a_link_in_a_learning_dir_cannot_choose_what_is_compiled_into_the_shared_cache(
    venv_python: Path, tmp_path: Path
) -> None:
    # the process names a venv source through a link in its own dir, then, before the daemon
    # compiles it, points the link at a look-alike whose __pycache__ is the venv's: the daemon
    # compiles the real path it checked, never the name
    venv = venv_python.parent.parent
    cache = for_user(venv, KEY)
    pkg = next(venv.glob("lib/python3.*/site-packages/tinyparse"))
    (pkg / "__pycache__").mkdir(exist_ok=True)
    link = cache.prefix / "link"
    link.symlink_to(pkg)
    (cache.prefix / "imported.txt").write_text(f"{link}/extra.py\0")
    files = sources(cache)
    assert files == [str(pkg / "extra.py")]

    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "extra.py").write_text("X = 2\n")  # the real one's size, and (below) its mtime
    st = (pkg / "extra.py").stat()
    os.utime(fake / "extra.py", ns=(st.st_atime_ns, st.st_mtime_ns))
    (fake / "__pycache__").symlink_to(pkg / "__pycache__")
    link.unlink()
    link.symlink_to(fake)
    asyncio.run(compile_into_shared(venv, venv_python, files))
    assert (
        _py(venv_python, {"PYTHONDONTWRITEBYTECODE": "1"}, "-c", "import tinyparse.extra as e; print(e.X)").strip()
        == "1"
    )


def test_a_report_that_is_a_fifo_or_a_link_is_not_read(venv_python: Path, tmp_path: Path) -> None:
    venv = venv_python.parent.parent
    listed = tmp_path / "listed.txt"
    listed.write_text(str(next(venv.glob("lib/python3.*/site-packages/tinyparse")) / "extra.py") + "\0")
    for make in (os.mkfifo, lambda p: p.symlink_to(listed)):
        cache = for_user(venv, KEY)
        make(cache.prefix / "imported.txt")
        got: list = []
        reader = threading.Thread(target=lambda g, c: g.append(sources(c)), args=(got, cache), daemon=True)
        reader.start()
        reader.join(10)
        assert got == [[]]  # read at once (a FIFO never blocks the harvest) and nothing taken from it


def test_users_recorded_from_several_threads_at_once_are_all_kept(tmp_path: Path) -> None:
    # the seed records a Ray head on the event loop while the harvest's threads record servers
    from gym_runtime.venvs.bytecode import record_users

    venv = tmp_path / "venv"
    venv.mkdir()
    threads = [threading.Thread(target=record_users, args=(venv, {f"user {i}"})) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert learned(venv) == {f"user {i}" for i in range(16)}
