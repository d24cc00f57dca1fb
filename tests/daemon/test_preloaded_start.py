"""``up`` forks the servers of one venv from a preloaded parent by default (docs/architecture.md §6,
"Preloaded parents"), and ``GYM_RUNTIME_PRELOAD=off`` starts each on its own: the start-up says
which, every server answers either way, and a forked server is named after its instance and runs
below the parent, not below a bubblewrap of its own. A cold venv is given the release's start-up
seed, compiled beside its parent's imports, only when a parent will read it: not when preloading is
off, nor when every server's tree is a copy-on-write view (which a forked server cannot have), as
the sandbox itself decides."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import psutil
import pytest

from sandbox import IsolationLevel, probe_isolation
from tests.helpers.daemon import SIMPLE_SERVERS, kill_tree, read_ready_line, simple_env, up_process


def _start(tmp_path: Path, mode: str, writable: str = "") -> tuple[dict, dict[str, psutil.Process], str]:
    pkg = simple_env(tmp_path / "pkg")
    proc = up_process(
        pkg,
        tmp_path,
        env={
            "GYM_RUNTIME_PRELOAD": mode,
            "GYM_RUNTIME_HOME": str(tmp_path / "home"),
            "GYM_RUNTIME_WRITABLE_TREES": writable,
        },
    )
    try:
        info = json.loads(read_ready_line(proc, timeout=300))
        listed = httpx.get(info["head_server"] + "/server_instances", trust_env=False).json()
        pids = {i["name"]: psutil.Process(i["pid"]) for i in listed if i["name"] in SIMPLE_SERVERS}
        answers = {n: httpx.get(u, trust_env=False, timeout=10).status_code for n, u in info["servers"].items()}
        seen = {n: (p.name(), p.parent().cmdline()) for n, p in pids.items()}
    finally:
        kill_tree(proc)
        err = proc.stderr.read()
    return answers, seen, err


@pytest.mark.skipif(probe_isolation().level != IsolationLevel.FULL, reason="preloaded parents need bubblewrap")
@pytest.mark.parametrize(("mode", "writable"), [("on", ""), ("off", ""), ("on", "*")])
def test_servers_of_one_venv_are_forked_from_one_parent_unless_it_is_off(
    tmp_path: Path, mode: str, writable: str
) -> None:
    answers, seen, err = _start(tmp_path, mode, writable)
    assert set(answers) >= SIMPLE_SERVERS and all(code < 500 for code in answers.values()), answers
    forked = [line for line in err.splitlines() if "servers forked from one parent that imported" in line]
    # a venv with nothing recorded (a state root of its own) is seeded only for a parent to read
    seeded = [line for line in err.splitlines() if "sources the release's processes import at start-up" in line]
    if mode == "on" and not writable:
        assert forked and f"{len(SIMPLE_SERVERS)} servers forked" in forked[0], err
        assert len(seeded) == 1 and "beside its processes' start" in seeded[0], err
        # the seed compiles beside the parent's imports, not before them: the parent is started (the
        # sandbox's prepare) before the seed's compile begins, so the seed ends after the start-up's
        # "starting N server(s)" line, which comes once the parents are started
        lines = err.splitlines()
        spawned = next(i for i, line in enumerate(lines) if "server(s) (isolation:" in line)
        assert spawned < lines.index(seeded[0]), err
        for name, (comm, parent_argv) in seen.items():
            assert comm == name[:15]
            assert parent_argv[-2].endswith("_zygote.py"), parent_argv
    else:
        assert not forked and not seeded, err
        if writable:
            assert all(
                f"preload: server {n} starts on its own: its tree is a copy-on-write view" in err
                for n in SIMPLE_SERVERS
            ), err
        for _comm, parent_argv in seen.values():
            assert "bwrap" in parent_argv[0], parent_argv
