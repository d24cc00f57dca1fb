"""Fault: the disk holding the run's logs fills up while a server keeps logging (a small tmpfs as
the work dir; a server fills its own work dir on it, logs 100 lines, then frees the space).

Expected: the daemon goes on supervising (it used to print a traceback for every chunk of output it
could not write); the server's log tail still has every line and says once that the file could not
be written; once space is free, the file gets the later lines and a note of how many bytes are
missing; the daemon stops cleanly."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from tests.helpers.daemon import FIXTURE_APP, kill_tree, read_ready_line, up_process, write_fixture_package
from tests.helpers.disks import small_disk

FILLER = (
    """import os, threading, time
def fill():
    while not os.path.exists(os.path.join(os.environ['HOME'], 'contract.json')):  # the server has started
        time.sleep(0.05)
    time.sleep(0.5)
    path = os.path.join(os.environ['HOME'], 'fill.bin')
    try:
        with open(path, 'wb') as f:
            while True:
                f.write(b'0' * (1 << 20)); f.flush()
    except OSError as e:
        print('filler: the disk is full:', e, flush=True)
    for i in range(100):
        print('filler: line', i, 'x' * 200, flush=True)
    time.sleep(3)
    os.remove(path)
    print('filler: space freed', flush=True)
threading.Thread(target=fill, daemon=True).start()
"""
    + FIXTURE_APP
)


def test_a_full_log_disk_loses_no_tail_and_stops_nothing(tmp_path: Path) -> None:
    pkg = write_fixture_package(
        tmp_path / "pkg", {"filler": {"resources_servers": {"filler": {"domain": "other"}}}}, apps={"filler": FILLER}
    )
    with small_disk(tmp_path / "run", 16):
        proc = up_process(pkg, tmp_path, env={"GYM_RUNTIME_HOME": str(tmp_path / "home")})
        try:
            info = json.loads(read_ready_line(proc))
            log = tmp_path / "run/logs/filler.log"
            deadline = time.monotonic() + 60
            while "filler: space freed" not in log.read_text(errors="replace"):
                assert time.monotonic() < deadline and proc.poll() is None, log.read_text()[-2000:]
                time.sleep(0.2)
            lines = httpx.get(
                info["head_server"] + "/servers/filler/logs", params={"tail": 400}, trust_env=False, timeout=30
            ).json()["lines"]
            assert any(f"the log file {log} could not be written (No space left on device)" in ln for ln in lines)
            assert [ln for ln in lines if ln.startswith("filler: line ")][-1].startswith("filler: line 99 ")
            text = log.read_text(errors="replace")
            assert "bytes of output are missing here" in text and "filler: space freed" in text
            assert httpx.get(info["servers"]["filler"], trust_env=False, timeout=10).status_code == 200
            proc.terminate()
            assert proc.wait(30) == 0
            err = proc.stderr.read()
            assert "Traceback" not in err and "Exception in callback" not in err, err[-3000:]
        finally:
            kill_tree(proc)
