"""Tests marked ``opensandbox`` run only when selected, and ``.ci/run`` selects them (docs/runtime.md, "What the tests cover, and what they do not")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INFRA_TESTS = "tests/opensandbox/test_server_infra.py"


def test_the_readme_command_skips_them_saying_how_to_select_them() -> None:
    """``pytest`` without ``-m`` skips them at collection: no image is made, no server started."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", INFRA_TESTS, "-q", "-rs", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "4 skipped" in done.stdout and "select it with `pytest -m opensandbox`" in done.stdout, done.stdout[-3000:]
    assert "opensandbox-server 1.1.1 at" not in done.stdout


def test_ci_runs_them_beside_the_suite() -> None:
    """``.ci/run`` starts ``pytest -m opensandbox`` before the suite, in the background, and keeps its status."""
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines() if not ln.startswith("#")]
    start = lines.index('./uvw run pytest -m opensandbox >"$opensandbox_log" 2>&1 &')
    assert (
        start < lines.index("./uvw run pytest || suite_rc=$?") < lines.index('wait "$opensandbox" || opensandbox_rc=$?')
    )
    loop = next(ln for ln in lines if ln.startswith("for rc in "))
    assert '"$opensandbox_rc"' in loop and lines.index(loop) > lines.index('wait "$opensandbox" || opensandbox_rc=$?')
