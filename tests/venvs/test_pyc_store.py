"""The bytecode store: what the daemon compiled for a venv outlives the venv's deletion, comes back
into a rebuilt venv (real uv) before any process starts, and is used only for the exact source
bytes and interpreter it was compiled for."""

from __future__ import annotations

import asyncio
import marshal
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gym_runtime.venvs import build_venvs, plan_venvs
from gym_runtime.venvs.bytecode import for_user, harvest, learned
from gym_runtime.venvs.env_bytecode import EnvironmentBytecode
from gym_runtime.venvs.pyc_store import PycStore, interpreter
from gym_runtime.venvs.store import read_marker
from tests.helpers.index import write_simple_index
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import merged_config, synthetic_pkg

KEY = "resources_servers/acme /pkg/resources_servers/acme"


class Venv:
    """One real venv (tinyparse 0.3.0 from a loopback index), rebuildable after deletion."""

    def __init__(self, tmp: Path, make_settings) -> None:
        build_wheel(tmp / "files", "tinyparse", "0.3.0", files={"tinyparse/extra.py": "X = 1\n"})
        pkg = synthetic_pkg(tmp / "pkg", {"acme": ("resources_servers", "tinyparse==0.3.0\n")})
        self.settings = make_settings(write_simple_index(tmp / "files", tmp / "idx"))
        self.plan = plan_venvs(merged_config(pkg), self.settings)
        self.store = PycStore(self.settings.bytecode_dir)
        self.python = self.build()
        self.path = self.python.parent.parent
        self.digest = read_marker(self.path)["digest"]

    def build(self) -> Path:
        return build_venvs(self.plan, self.settings).for_instance("acme").python

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.python), *args],
            env={"PATH": "/usr/bin:/bin", **(env or {})},
            capture_output=True,
            text=True,
            check=True,
        )

    def pyc(self, module: str) -> Path:
        src = next(self.path.glob(f"lib/python3.*/site-packages/tinyparse/{module}.py"))
        return src.parent / "__pycache__" / f"{module}.{interpreter(self.python).tag}.pyc"

    def stored(self, module: str) -> Path:
        """The store's object recorded for ``tinyparse/<module>.py``."""
        files = self.store.index(self.digest)["files"]
        return self.store._object(next(e[1] for r, e in files.items() if r.endswith(f"tinyparse/{module}.py")))

    def learn_and_save(self) -> None:
        """A learning process imports tinyparse and tinyparse.extra; the daemon compiles them,
        records the user and saves the shared cache to the store."""
        cache = for_user(self.path, KEY)
        self.run("-c", "import tinyparse.extra", env=cache.env)
        asyncio.run(harvest(self.python, [cache]))
        assert self.store.save(self.path, self.digest, interpreter(self.python), learned(self.path)) == 2

    def rebuild_and_prepare(self, change=None) -> EnvironmentBytecode:
        """Delete the venv, build it again (uv links from its cache), ``change(venv)``, then the
        daemon's preparation before any process starts."""
        shutil.rmtree(self.path)
        assert self.build() == self.python and not list(self.path.rglob("*.pyc"))
        if change is not None:
            change(self)
        env = EnvironmentBytecode(store=self.store)
        asyncio.run(env.prepare([self.python]))
        return env


@pytest.fixture
def venv(tmp_path: Path, make_settings) -> Venv:
    return Venv(tmp_path, make_settings)


def _loaded_from_pyc(v: Venv, module: str) -> bool:
    """True when importing ``module`` (read-only cache, as a server does) loads its .pyc."""
    err = v.run("-v", "-c", f"import {module}", env={"PYTHONDONTWRITEBYTECODE": "1"}).stderr
    return f"code object from '{v.pyc(module.split('.')[-1] if '.' in module else '__init__')}'" in err


def test_a_rebuilt_venv_gets_its_bytecode_back_before_any_process_starts(venv: Venv) -> None:
    venv.learn_and_save()
    assert not (venv.settings.bytecode_dir).is_relative_to(venv.settings.venv_dir)
    venv.rebuild_and_prepare()
    assert learned(venv.path) == {KEY}
    again = for_user(venv.path, KEY)
    assert not again.learning and again.writable == [] and not (venv.path / ".gym-runtime" / "learn").exists()
    for module in ("__init__", "extra"):  # hard links to the store's objects: uv kept the sources' mtimes
        assert os.path.samefile(venv.pyc(module), venv.stored(module))
    assert _loaded_from_pyc(venv, "tinyparse") and _loaded_from_pyc(venv, "tinyparse.extra")
    assert venv.run("-c", "import tinyparse.extra as e; print(e.X)").stdout.strip() == "1"


def test_a_source_with_a_new_mtime_but_the_same_bytes_gets_its_header_rewritten(venv: Venv) -> None:
    venv.learn_and_save()

    def copy_sources(v: Venv) -> None:  # as uv does when its cache is on another filesystem
        src = v.pyc("extra").parent.parent / "extra.py"
        data = src.read_bytes()
        src.unlink()  # never write through uv's hard link into its cache
        src.write_bytes(data)
        os.utime(src, (1_000_000_000, 1_000_000_000))

    venv.rebuild_and_prepare(copy_sources)
    assert learned(venv.path) == {KEY}
    assert venv.pyc("extra").stat().st_nlink == 1  # a copy with the new source's mtime in its header
    assert _loaded_from_pyc(venv, "tinyparse.extra")


def test_a_changed_source_gets_no_stale_bytecode_and_its_users_learn_again(venv: Venv) -> None:
    venv.learn_and_save()

    def change(v: Venv) -> None:
        src = v.pyc("extra").parent.parent / "extra.py"
        src.unlink()
        src.write_text("X = 2\n")

    venv.rebuild_and_prepare(change)
    assert learned(venv.path) == set(), "a file was not placed: its users learn again"
    assert not venv.pyc("extra").exists() and venv.pyc("__init__").exists()
    assert (
        venv.run("-c", "import tinyparse.extra as e; print(e.X)", env={"PYTHONDONTWRITEBYTECODE": "1"}).stdout.strip()
        == "2"
    )
    assert for_user(venv.path, KEY).learning


def test_a_tampered_store_entry_is_never_used(venv: Venv) -> None:
    venv.learn_and_save()
    obj = venv.stored("__init__")
    data = obj.read_bytes()  # the right header (magic, mtime, size) with someone else's code
    code = compile("print('PLANTED')", "x.py", "exec")
    obj.write_bytes(data[:16] + marshal.dumps(code))

    venv.rebuild_and_prepare()
    assert not obj.exists(), "a corrupt object is removed"
    assert not venv.pyc("__init__").exists() and learned(venv.path) == set()
    out = venv.run("-c", "import tinyparse; print(tinyparse.__version__)", env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert out.stdout.strip() == "0.3.0" and "PLANTED" not in out.stdout


def test_a_record_for_another_interpreter_is_not_used(venv: Venv) -> None:
    venv.learn_and_save()
    index = venv.store._index_path(venv.digest)
    index.write_text(index.read_text().replace(interpreter(venv.python).magic.hex(), "00000000"))
    venv.rebuild_and_prepare()
    assert learned(venv.path) == set() and not list(venv.path.rglob("*.pyc"))


def test_the_store_keeps_the_most_recently_used_records_and_their_objects(venv: Venv) -> None:
    venv.learn_and_save()
    index = venv.store._index_path(venv.digest)
    older = index.with_name("0" * 24 + ".json")
    older.write_text(index.read_text())
    os.utime(older, (1, 1))
    obj = venv.store.root / "objects" / "ff" / ("ff" * 32 + ".pyc")  # named by no record
    obj.parent.mkdir(parents=True, exist_ok=True)
    obj.write_bytes(b"x")
    assert venv.store.prune(keep=1) == 2
    assert index.exists() and not older.exists() and not obj.exists()
    assert venv.rebuild_and_prepare() and learned(venv.path) == {KEY}


def test_the_store_copy_waits_until_every_process_is_ready(venv: Venv) -> None:
    """A venv whose users the store lacks (the first warm start after a cold one) is saved only
    once its processes are ready: the copy must not take a core and the disk from their start."""
    cache = for_user(venv.path, KEY)
    venv.run("-c", "import tinyparse.extra", env=cache.env)
    asyncio.run(harvest(venv.python, [cache]))  # learned in the venv, not yet in the store
    state = {"ready": False}

    async def run() -> tuple[set[str], set[str]]:
        env = EnvironmentBytecode(store=venv.store)
        await env.prepare([venv.python])
        env.user(venv.python, KEY, "acme")
        env.learn(lambda name: state["ready"])
        await asyncio.sleep(1.5)  # more than one round of the background task
        before = set(venv.store.users(venv.digest))
        state["ready"] = True
        assert await env.settled(30)
        await env.close()
        return before, set(venv.store.users(venv.digest))

    before, after = asyncio.run(run())
    assert before == set(), "nothing is copied into the store while a process still starts"
    assert after == {KEY}
