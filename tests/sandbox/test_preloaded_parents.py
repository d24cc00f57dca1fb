"""Servers of one venv forked from one preloaded parent (sandbox/zygote.py), in a real sandbox:
each keeps its own /tmp, its own writable directories (the other's are covered), its own
resolv.conf and secrets (the parent never holds them), no capability, and cannot signal its
parent; exits, stops and restarts
are seen as for any server; a parent whose imports start a thread forks nothing, and servers whose
parent ended start on their own."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import EgressPolicy, ProcessSpec, Sandbox
from sandbox.zygote import Preload, parent_groups
from tests.sandbox._run import APPS

SECRETS = {"s0": "sk-zero-" + "1" * 12, "s1": "sk-one-" + "2" * 12}


def _specs(tmp_path: Path, python: Path, preload: Preload, codes=(0, 0), env: dict | None = None) -> list[ProcessSpec]:
    specs = []
    for i, name in enumerate(("s0", "s1")):
        own, other = tmp_path / f"w{i}", tmp_path / f"w{1 - i}"
        own.mkdir(exist_ok=True)
        out = os.open(tmp_path / f"{name}.out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        specs.append(
            ProcessSpec(
                name,
                [str(python), "preload_probe.py", str(other), str(codes[i])],
                APPS,
                {"PATH": "/usr/bin:/bin", "GR_TEST_NAME": name, "GR_TEST_OWN": str(own), **(env or {})},
                read_only_paths=[APPS, python.parent.parent],
                writable_paths=[own],
                stdout_fd=out,
                stderr_fd=out,
                private_env={"GR_TEST_PRIVATE": SECRETS[name]},
                preload=preload,
            )
        )
    return specs


async def _prepared(sb: Sandbox, specs: list[ProcessSpec]) -> list[str]:
    """``sb.prepare(specs)`` and its background lines, once nothing is left to wait for before a spawn."""
    said: list[str] = []
    said += await sb.prepare(specs, said.append)
    await asyncio.gather(*{f for s in specs if (f := sb.spawn_after(s)) is not None})
    return said


async def _ran(sb: Sandbox, specs: list[ProcessSpec], go: Path | None = None) -> tuple[list[str], list[int], list]:
    """Prepare ``specs``, spawn each, touch ``go/w{i}/go`` for each (when ``go``) and wait for
    their exits (60 s each); the specs' output descriptors and the sandbox closed. Returns the lines
    said, the exit codes and the processes."""
    try:
        lines = await _prepared(sb, specs)
        procs = [sb.spawn(s) for s in specs]
        for i in range(len(specs) if go else 0):
            (go / f"w{i}" / "go").touch()
        return lines, [await asyncio.wait_for(p.wait(), 60) for p in procs], procs
    finally:
        for s in specs:
            os.close(s.stdout_fd)
        await sb.close()


async def _prepared_once(
    tmp_path: Path, python: Path, preload: Preload, env: dict | None = None, read_only: list[Path] | None = None
) -> list[str]:
    """A sandbox whose two servers of ``apps/preload`` (``env`` added, ``read_only`` bound too)
    share ``preload``, prepared, then closed; the lines said."""
    sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / "sb")
    specs = _specs(tmp_path, python, preload, env={"PYTHONPATH": str(APPS / "preload"), **(env or {})})
    for spec in specs:
        spec.read_only_paths = [*spec.read_only_paths, *(read_only or [])]
    try:
        return await _prepared(sb, specs)
    finally:
        for s in specs:
            os.close(s.stdout_fd)
        await sb.close()


def _out(tmp_path: Path, name: str) -> list[dict]:
    return [json.loads(ln) for ln in (tmp_path / f"{name}.out").read_text().splitlines() if ln.startswith("{")]


def _environ(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return f.read()


@pytest.fixture
def bwrap(full_available):
    if not full_available:
        pytest.skip("bubblewrap with a user namespace is not available on this host")


def test_two_servers_forked_from_one_parent_keep_their_own_views(bwrap, tmp_path, plain_python) -> None:
    async def main():
        sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / "sb")
        try:
            specs = _specs(
                tmp_path,
                plain_python,
                # a module the venv lacks, or whose package lacks it (another release of a library), is skipped
                Preload(("email.mime.text", "json", "no_such_module_here", "json.no_such_sub", "no_such_pkg.sub")),
                codes=(0, 3),
            )
            lines = await _prepared(sb, specs)
            parent = next(p for p in sb.processes if p.name.startswith("preload:"))
            procs = [sb.spawn(s) for s in specs]
            for _ in range(600):  # both have said what they see, and wait for their `go`
                if all(_out(tmp_path, s.name) for s in specs):
                    break
                await asyncio.sleep(0.05)
            environs = [_environ(parent.app_pid()), *(_environ(p.pid) for p in procs)]
            for i in range(2):
                (tmp_path / f"w{i}" / "go").touch()
            codes = [await asyncio.wait_for(p.wait(), 60) for p in procs]
            return lines, codes, environs, [p.pid for p in procs], parent.app_pid()
        finally:
            for s in specs:
                os.close(s.stdout_fd)
            await sb.close()

    lines, codes, environs, pids, parent_pid = asyncio.run(main())
    assert any("2 servers forked from one parent that imported 2 modules" in ln for ln in lines), lines
    assert not any("immortal" in ln or "not imported" in ln for ln in lines)  # 3.11: nothing made immortal
    assert codes == [0, 3]  # each server's own exit status, as the parent reaped it
    assert parent_pid not in pids
    for name in ("s0", "s1"):
        (seen,) = _out(tmp_path, name)
        assert seen["preloaded"] is True  # imported by the parent, before the fork
        assert seen["private"] == SECRETS[name]
        assert seen["other_listing"] is None  # the other server's writable directory is not there
        assert "mine" in seen["tmp"]  # its own /tmp...
        assert (tmp_path / f"w{name[1]}" / "written").read_text() == "by the server"  # ...and its own directory
        assert seen["cap_eff"] == "0000000000000000" and seen["no_new_privs"] == "1"
        assert seen["signal_parent"] == "PermissionError"  # Landlock's signal scope: not its parent, no sibling
        assert seen["argv"][0] == "preload_probe.py" and seen["main_name"] == "__main__"
        assert seen["cwd"] == str(APPS)
    assert _out(tmp_path, "s0")[0]["random"] != _out(tmp_path, "s1")[0]["random"]  # not one parent's random state
    resolvs = {_out(tmp_path, n)[0]["resolv"] for n in ("s0", "s1")}
    assert len(resolvs) == 2  # a resolver address of its own each (its DNS answers are its own)
    for environ in environs:  # neither the parent nor a sibling started with another server's secret
        assert not any(s.encode() in environ for s in SECRETS.values())


def test_what_a_parent_on_cpython_3_13_imported_is_immortal_in_its_servers(bwrap, tmp_path) -> None:
    """On CPython 3.12/3.13 the parent makes what it holds immortal before it forks (PEP 683's
    count, as ``None`` has it), so its servers never write those pages by counting references; an
    object a server makes after the fork counts as usual. The 3.11 parents of the other tests make
    nothing immortal (their ``preloaded`` line says no count)."""
    from tests.helpers.egress_targets import make_venv
    from tests.helpers.gym_python import gym_python

    python = make_venv(tmp_path / "v313", python=str(gym_python()))

    async def main():
        sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / "sb")
        specs = _specs(tmp_path, python, Preload(("email.mime.text",)))
        lines, codes, _ = await _ran(sb, specs, tmp_path)
        return lines, codes

    lines, codes = asyncio.run(main())
    assert codes == [0, 0]
    assert any("forked from one parent that imported 1 modules" in ln and "objects made immortal" in ln for ln in lines)
    for name in ("s0", "s1"):
        (seen,) = _out(tmp_path, name)
        assert seen["count_inherited"] == seen["count_inherited_text"] == seen["count_none"] == 2**32 - 1, seen
        assert seen["count_own"] < 100


def test_stop_and_restart_fork_again_and_a_lost_parent_ends_its_servers(bwrap, tmp_path, plain_python) -> None:
    async def main():
        sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / "sb")
        specs = _specs(tmp_path, plain_python, Preload(("email.mime.text",)))
        for s in specs:
            s.argv = [str(plain_python), "-m", "http.server", "0", "--bind", "127.0.0.1"]
        try:
            await _prepared(sb, specs)
            first = sb.spawn(specs[0])
            await asyncio.sleep(0.5)
            stopped = await first.stop(grace_s=5)
            again = sb.spawn(specs[0])
            await asyncio.sleep(0.5)
            parent = next(p for p in sb.processes if p.name.startswith("preload:"))
            parent.kill_now()
            lost = await asyncio.wait_for(again.wait(), 20)
            alone = sb.spawn(specs[0])  # no parent now: started the usual way
            return stopped, first.pid, again.pid, lost, alone.bwrapped, again.bwrapped
        finally:
            for s in specs:
                os.close(s.stdout_fd)
            await sb.close()

    stopped, first, again, lost, alone_bwrapped, again_bwrapped = asyncio.run(main())
    assert stopped.reason == "terminated" and stopped.returncode == -15
    assert first != again and again_bwrapped is False
    assert lost == -9  # its parent's pid namespace ended, and the waiter woke
    assert alone_bwrapped is True


def test_a_server_is_forked_again_after_the_host_removed_a_directory_its_parent_binds(
    bwrap, tmp_path, plain_python
) -> None:
    # the daemon removes a server's learning dir once it has harvested it (gym_runtime/venvs/bytecode.py)
    # while the parent's view still binds it: a later fork, which covers the other servers' directories,
    # skips what is gone (a fork that failed there left the parent forking nothing more)
    async def main():
        sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / "sb")
        specs = _specs(tmp_path, plain_python, Preload(("email.mime.text",)))
        learning = [tmp_path / "learn0", tmp_path / "learn1"]
        for s, d in zip(specs, learning, strict=True):
            d.mkdir()
            s.writable_paths = [*s.writable_paths, d]
            s.argv = [str(plain_python), "-m", "http.server", "0", "--bind", "127.0.0.1"]
        try:
            await _prepared(sb, specs)
            first = sb.spawn(specs[0])
            await asyncio.sleep(0.5)
            await first.stop(grace_s=5)
            for d in learning:
                shutil.rmtree(d)
            specs[0].writable_paths = [p for p in specs[0].writable_paths if p != learning[0]]  # its spec made again
            again = sb.spawn(specs[0])
            await asyncio.sleep(0.5)
            return first.bwrapped, again.bwrapped, again.poll()
        finally:
            for s in specs:
                os.close(s.stdout_fd)
            await sb.close()

    first, again, running = asyncio.run(main())
    assert first is False and again is False  # forked both times
    assert running is None


def test_a_parent_whose_imports_start_a_thread_forks_nothing(bwrap, tmp_path, plain_python) -> None:
    async def main():
        sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / "sb")
        specs = _specs(tmp_path, plain_python, Preload(("threader",)), env={"PYTHONPATH": str(APPS / "preload")})
        lines, codes, procs = await _ran(sb, specs, tmp_path)
        return lines, codes, [p.bwrapped for p in procs]

    lines, codes, bwrapped = asyncio.run(main())
    assert any(
        "started threads (started-at-import), which a fork does not carry; its servers start on their own" in ln
        for ln in lines
    ), lines
    assert codes == [0, 0] and bwrapped == [True, True]
    assert _out(tmp_path, "s0")[0]["preloaded"] is False


def test_a_learning_parent_writes_what_it_compiles_into_its_own_dir(bwrap, tmp_path, plain_python) -> None:
    # the host's PYTHONDONTWRITEBYTECODE reaches the servers' environment; a parent given a learning
    # dir must still write there, or its imports never reach the venv's shared cache and every start
    # compiles them again
    learn = tmp_path / "learn"
    learn.mkdir()
    preload = Preload(("plainmod",), {"PYTHONPYCACHEPREFIX": str(learn)}, (learn,))
    lines = asyncio.run(_prepared_once(tmp_path, plain_python, preload, {"PYTHONDONTWRITEBYTECODE": "1"}))
    assert any("forked from one parent" in ln or "imported" in ln for ln in lines), lines
    assert [p.name for p in learn.rglob("plainmod.*.pyc")] == [f"plainmod.{sys.implementation.cache_tag}.pyc"]


def _reporting_parent(tmp_path: Path, fresh: str, modules: tuple[str, ...]) -> tuple[Path, Path, Preload]:
    """A dir ``mods`` holding module ``fresh`` (no bytecode anywhere yet), the parent's learning
    dir, and a parent that imports ``modules`` reading the shared cache and reporting there."""
    mods, learn = tmp_path / "mods", tmp_path / "learn"
    mods.mkdir()
    learn.mkdir()
    (mods / f"{fresh}.py").write_text("VALUE = 1\n")
    return mods, learn, Preload(modules, {"PYTHONDONTWRITEBYTECODE": "1"}, (learn,), report=str(learn / "imported.txt"))


def test_a_reporting_parent_lists_what_it_compiled_and_writes_no_bytecode(bwrap, tmp_path, plain_python) -> None:
    # the daemon's parents report (gym_runtime/venvs/bytecode.py): they read the venv's shared cache
    # and the standard library's bytecode, and list what they had to compile for the daemon to compile
    mods, learn, preload = _reporting_parent(tmp_path, "freshmod", ("freshmod", "email.mime.text"))
    report = learn / "imported.txt"
    lines = asyncio.run(_prepared_once(tmp_path, plain_python, preload, {"PYTHONPATH": str(mods)}, [mods]))
    assert any("servers forked from one parent that imported 2 modules" in ln for ln in lines), lines
    listed = report.read_text().split("\0")[:-1]
    assert str(mods / "freshmod.py") in listed
    assert not any(p.endswith("/email/mime/text.py") for p in listed), "the stdlib's own bytecode was read"
    assert all(p.endswith(".py") and p.startswith("/") for p in listed)
    assert [p.name for p in learn.iterdir()] == ["imported.txt"]  # no bytecode, no temporary file left
    assert not (mods / "__pycache__").exists()


def test_a_forked_learning_server_reads_the_shared_cache_and_lists_what_it_compiled(
    bwrap, tmp_path, plain_python
) -> None:
    # a server not learned yet gets a learning dir and a report file (gym_runtime/venvs/bytecode.py);
    # forked from a parent that reads the shared cache, it reads it too (the standard library's
    # bytecode included) instead of compiling everything it imports after the fork under its prefix
    mods, _, preload = _reporting_parent(tmp_path, "childmod", ("email.mime.text",))

    async def main():
        sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / "sb")
        specs = _specs(
            tmp_path, plain_python, preload, env={"PYTHONPATH": str(mods), "GR_TEST_IMPORT": "childmod,xml.dom.minidom"}
        )
        for i, spec in enumerate(specs):
            learn = tmp_path / f"learn{i}"
            learn.mkdir()
            spec.env.update(
                {"PYTHONPYCACHEPREFIX": str(learn), "GYM_RUNTIME_PYCACHE_REPORT": str(learn / "imported.txt")}
            )
            spec.read_only_paths.append(mods)
            spec.writable_paths.append(learn)
        lines, codes, procs = await _ran(sb, specs, tmp_path)
        return lines, codes, [p.bwrapped for p in procs]

    lines, codes, bwrapped = asyncio.run(main())
    assert any("2 servers forked from one parent" in ln for ln in lines), lines
    assert codes == [0, 0] and bwrapped == [False, False]  # forked, not started on their own
    for i in range(2):
        learn = tmp_path / f"learn{i}"
        listed = (learn / "imported.txt").read_text().split("\0")[:-1]
        assert str(mods / "childmod.py") in listed
        assert not any("/xml/dom/" in p for p in listed), "the standard library's own bytecode was read"
        assert [p.name for p in learn.iterdir()] == ["imported.txt"]  # no bytecode written
    assert not (mods / "__pycache__").exists()


def test_a_parent_forks_two_or_more_servers_of_one_interpreter_that_can_be_forked() -> None:
    groups, alone = parent_groups(
        {
            "a": (["/v1/bin/python", "app.py"], False),
            "b": (["/v1/bin/python", "-m", "srv"], False),
            "c": (["/v2/bin/python", "app.py"], False),  # the only one of its interpreter
            "d": (["/v2/bin/python", "app.py"], True),  # a copy-on-write tree
            "e": (["/v2/bin/python", "-c", "print(1)"], False),  # not `python script` / `python -m module`
        }
    )
    assert groups == {"/v1/bin/python": ["a", "b"]}
    assert alone == {
        "d": "its tree is a copy-on-write view",
        "e": "it is not run as `python script` or `python -m module`",
    }


BROKEN = {
    "syntax": "import json\nx = = 1\n",
    "raises": "import json\n\n\ndef start():\n    raise RuntimeError('no config for this server')\n\n\nstart()\n",
}


def test_a_forked_server_that_fails_prints_what_python_script_prints(bwrap, tmp_path, plain_python) -> None:
    """Its traceback starts in its own code (none of the parent's frames, no runpy), its exit status is 1;
    the script is named as on its command line (``python script`` names it by its absolute path)."""
    apps = tmp_path / "apps"
    apps.mkdir()
    for name, text in BROKEN.items():
        (apps / f"{name}.py").write_text(text)

    async def main():
        sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / "sb")
        specs = []
        for name in BROKEN:
            out = os.open(tmp_path / f"{name}.out", os.O_WRONLY | os.O_CREAT, 0o600)
            specs.append(
                ProcessSpec(
                    name,
                    [str(plain_python), f"{name}.py"],
                    apps,
                    {"PATH": "/usr/bin:/bin"},
                    read_only_paths=[apps, plain_python.parent.parent],
                    stdout_fd=out,
                    stderr_fd=out,
                    preload=Preload(("json",)),
                )
            )
        lines, codes, _ = await _ran(sb, specs)
        return lines, codes

    lines, codes = asyncio.run(main())
    assert any("2 servers forked from one parent" in ln for ln in lines), lines
    assert codes == [1, 1]
    for name in BROKEN:
        got = (tmp_path / f"{name}.out").read_text()
        plain = subprocess.run([str(plain_python), f"{name}.py"], cwd=apps, capture_output=True, text=True)
        assert got == plain.stderr.replace(f'"{apps}/', '"'), (got, plain.stderr)
        assert "_zygote" not in got and "runpy" not in got


UNMAP_PROBE = r"""
import importlib.util, json, sys

spec = importlib.util.spec_from_file_location("_zygote", sys.argv[1])
zygote = importlib.util.module_from_spec(spec)
spec.loader.exec_module(zygote)
import pydantic_core
from pydantic_core import _pydantic_core as ext


def mapped():  # the extension's mappings by permissions: [resident kB, anonymous kB]
    seen, cur = {}, None
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if not parts[0].endswith(":"):
                cur = parts[1] + " " + parts[0] if len(parts) >= 6 and parts[5] == ext.__file__ else None
                if cur:
                    seen[cur] = [0, 0]
            elif cur and parts[0] in ("Rss:", "Anonymous:"):
                seen[cur][parts[0] == "Anonymous:"] = int(parts[1])
    return seen


before = mapped()
dropped = zygote._unmap_file_pages()
after = mapped()
schema = pydantic_core.core_schema.int_schema()
print(json.dumps({"before": before, "after": after, "dropped": dropped,
                  "runs": pydantic_core.SchemaValidator(schema).validate_python("42")}))
"""


def test_a_parent_stops_mapping_the_library_pages_its_imports_read_and_the_libraries_still_run() -> None:
    """The parent drops its mappings of the pages its imports read of a native library (no server
    shares them: a fork copies no page-table entry of a clean file mapping), only where the mapping
    cannot differ from its file (read-only, no copied page); the writable and copied mappings
    keep every page, and the library runs afterwards, mapping again what it reads."""
    zygote = Path(__file__).resolve().parents[2] / "sandbox" / "_zygote.py"
    r = subprocess.run([sys.executable, "-c", UNMAP_PROBE, str(zygote)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    seen = json.loads(r.stdout)
    assert seen["runs"] == 42
    unwritten = {span for span, (_, anon) in seen["before"].items() if "w" not in span.split()[0] and anon == 0}
    assert seen["dropped"] >= sum(seen["before"][span][0] for span in unwritten) * 1024 > 0
    for span, (rss, anon) in seen["before"].items():
        if span in unwritten:
            assert seen["after"][span] == [0, 0], span  # read-only and as in its file: dropped
        else:
            assert seen["after"][span] == [rss, anon], span  # written, or copied: kept as it was
