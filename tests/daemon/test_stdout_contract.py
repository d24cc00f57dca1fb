"""`up`'s stdout carries the ready line only, whatever a library in the daemon prints there.

Bug: under `--placement ray` the daemon is a Ray driver, and Ray prints cluster events to the
driver's stdout (`(raylet) The node with node id ... has been marked dead`, ray 2.60
`_private/worker.py` `listen_error_messages`, whatever `log_to_driver` says); once a node had been
lost, a new `up` printed that before its ready line, and a training job reading the first stdout
line as JSON failed. A `sitecustomize` printing to stdout from a thread stands in for the library."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.helpers.daemon import kill_tree, read_ready_line, up_process, write_fixture_package

NOISY = """import sys, threading, time
def _noise():  # like Ray's listener thread: it starts once the daemon runs (its head server loaded)
    while "gym_runtime.head.app" not in sys.modules:
        time.sleep(0.01)
    while True:
        print("(raylet) a library writing to stdout", flush=True)
        time.sleep(0.05)
threading.Thread(target=_noise, daemon=True).start()
"""


def test_only_the_ready_line_reaches_stdout(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NOISY)
    pkg = write_fixture_package(
        tmp_path / "pkg", {"acme_math": {"resources_servers": {"acme_math": {"domain": "math"}}}}
    )
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)}
    proc = up_process(pkg, tmp_path, env=env)
    try:
        info = json.loads(read_ready_line(proc))
        assert info["status"] == "ready"
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0 and out == ""  # nothing after the ready line either
    assert "(raylet) a library writing to stdout" in err
