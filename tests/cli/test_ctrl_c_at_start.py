"""A Ctrl-C during the first second (the command modules are still being imported) exits 130 with
one line and no traceback (bug: a KeyboardInterrupt traceback from an import). The console script
itself is run, as a user runs it. The interrupt lands at a moment the test controls, not after a
guessed delay (a fast machine used to finish validating before the first SIGINT): an import gate
(``sitecustomize`` on ``PYTHONPATH``) holds the process at the first import of one chosen module,
says so in a file, and the test sends SIGINT only then."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "gym-runtime"
EXAMPLE = ROOT / "examples" / "native-quickstart"

# Python imports ``sitecustomize`` at start-up; this one holds the first import of the module named
# by GATE_MODULE: it writes GATE_FILE, then sleeps until the signal arrives (60 s at most).
_GATE = """
import os, sys, time
class _Gate:
    fired = False
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["GATE_MODULE"] and not _Gate.fired:
            _Gate.fired = True
            open(os.environ["GATE_FILE"], "w").close()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                time.sleep(0.01)
        return None
sys.meta_path.insert(0, _Gate())
"""

# Modules ``validate`` imports after the console script's entry point started, from the first (the
# parser) to deep inside the command (the package loader and the libraries it pulls in).
GATES = ("gym_runtime.cli.parser", "gym_runtime.errors", "pydantic", "omegaconf", "gym_runtime.package.loader")


def _interrupt_at_import_of(module: str, tmp: Path) -> tuple[int, str]:
    (tmp / "sitecustomize.py").write_text(_GATE)
    gate_file = tmp / f"held-{module}"
    env = {
        **os.environ,
        "PYTHONDONTWRITEBYTECODE": "1",
        "GATE_MODULE": module,
        "GATE_FILE": str(gate_file),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.Popen(
        [str(SCRIPT), "validate", str(EXAMPLE)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not gate_file.exists():
        assert proc.poll() is None, f"finished before importing {module}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{module} was not imported within 60 s"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


@pytest.mark.parametrize("module", GATES)
def test_ctrl_c_during_imports_exits_130_with_one_line(module: str, tmp_path: Path) -> None:
    code, err = _interrupt_at_import_of(module, tmp_path)
    assert (code, err.strip()) == (130, "interrupted"), (module, code, err)
