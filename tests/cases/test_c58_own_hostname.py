"""Case C58 (tests/cases/data/C58/README.md) as its run script does it: ``dry-run`` of the case's
package, whose resources server ``kernel_env`` resolves its own host name at start-up and binds its
worker pool there, at isolation ``full`` and ``none``.

Owed: the server starts at every level, and the name it sees resolves to loopback (inside the
sandbox: the sandbox's own name, ``gym-sandbox``, mapped in its ``/etc/hosts``). The failure it
used to end in, and the hint that looped, are held by tests/daemon/test_start_egress.py and
tests/sandbox/test_own_hostname.py."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from sandbox import probe_isolation
from tests.examples.conftest import dry_run
from tests.helpers.cases import CASES

C58 = CASES / "C58"


def _server_lines() -> list[str]:
    logs = sorted(Path(os.environ["GYM_RUNTIME_HOME"]).glob("runs/*/logs/kernel_env.log"), key=os.path.getmtime)
    assert logs, "no log of kernel_env"
    return [ln for ln in logs[-1].read_text().splitlines() if ln.startswith("C58 ")]


@pytest.mark.pypi
@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["full", "none"])
def test_c58_a_server_that_resolves_its_own_host_name_starts_and_scores(isolation: str) -> None:
    if isolation == "full" and probe_isolation().level.value != "full":
        pytest.skip("this host allows no full isolation")
    assert "--isolation $iso" in (C58 / "run.sh").read_text()
    run = dry_run(C58 / "pkg", C58 / "rows.jsonl", "--samples", "1", "--isolation", isolation, timeout=600)
    assert run.code == 0, run.stderr[-3000:]
    assert "GR-START-EGRESS" not in run.stderr
    assert re.search(r"rollouts: 1\s+succeeded: 1\s+failed: 0", run.stdout), run.stdout[-2000:]
    assert "mean reward: 1.000" in run.stdout
    seen = _server_lines()
    pool = next(ln for ln in seen if "worker pool listening on" in ln)
    assert pool.startswith("C58 worker pool listening on 127.0.0.1:"), seen
    if isolation == "full":
        assert any(ln.startswith("C58 gethostname='gym-sandbox'") for ln in seen), seen
