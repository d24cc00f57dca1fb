"""A state root and a package whose paths hold what a file system allows: spaces, quotes, ``$``,
non-ASCII letters, a newline, and long names. ``up`` starts from them, ``status`` finds the daemon
through its record, a stop leaves nothing; the bytecode a run learns is compiled for a venv whose
path holds a newline (its path lists are NUL-separated, gym_runtime/venvs/bytecode.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gym_runtime.venvs.bytecode import REPORT, compile_into_shared, for_user, sources
from tests.helpers.daemon import descendants, kill_tree, read_ready_line, simple_env, wait_gone

ROOT = Path(__file__).resolve().parents[2]
NAMES = {
    "quotes-spaces-non-ascii": "dir é ü 'single' \"double\" $HOME `x` ;&",
    "newline": "line one\nline two",
    "long": "/".join(["d" * 80, "e" * 80, "f" * 80]),
}


@pytest.mark.parametrize("name", NAMES.values(), ids=NAMES.keys())
def test_up_and_status_with_an_odd_state_root_and_package_path(tmp_path: Path, name: str) -> None:
    base = tmp_path / name
    pkg = simple_env(base / f"pkg {name.split('/')[0]}")
    env = {**os.environ, "GYM_RUNTIME_HOME": str(base / "state")}
    cli = [sys.executable, "-m", "gym_runtime.cli.main"]
    proc = subprocess.Popen(
        [*cli, "up", str(pkg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    try:
        ready = json.loads(read_ready_line(proc, timeout=300))
        status = subprocess.run([*cli, "status", "--json"], capture_output=True, text=True, env=env, timeout=60)
        assert status.returncode == 0, status.stderr
        assert ready["head_server"] in status.stdout
        assert str(base / "state") in ready["logs_dir"]
        tree = [p.pid for p in descendants(proc.pid)]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err
    assert wait_gone(tree, timeout=10) == []


def test_bytecode_is_learned_and_compiled_for_a_venv_path_with_a_newline(tmp_path: Path) -> None:
    venv = tmp_path / "state\nroot" / "venv é 'q'"
    src = venv / "lib" / "mod.py"
    src.parent.mkdir(parents=True)
    src.write_text("X = 1\n")
    cache = for_user(venv, "server")
    (cache.prefix / REPORT).write_bytes(os.fsencode(src) + b"\0")
    assert sources(cache) == [str(src)]
    assert asyncio.run(compile_into_shared(venv, Path(sys.executable), [str(src)])) == 1
    assert [p.suffix for p in (src.parent / "__pycache__").iterdir()] == [".pyc"]
