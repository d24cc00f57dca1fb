"""``dry-run --watch`` after an edit of a config file whose server names a sandbox provider block:
the merged-again config gives the block what the start gave it on this host (``daytona`` becomes
``gym_runtime``, docs/runtime.md "Task sandboxes"), so only the server whose block changed is
restarted. The block used to come back as the config wrote it: every server was restarted for the
difference, and the servers got a provider this host cannot give."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.environments import shared_venvs
from tests.helpers.watch import WatchRun, watched_quickstart

pytestmark = [pytest.mark.pypi, pytest.mark.slow]


@pytest.mark.timeout(900)
def test_a_config_edit_keeps_the_provider_block_as_the_start_gave_it(tmp_path: Path) -> None:
    pkg, rows = watched_quickstart(tmp_path)
    config = pkg / "resources_servers" / "example_arithmetic" / "configs" / "arithmetic.yaml"
    text = config.read_text().replace("      domain: math\n", "      domain: math\n      sandbox_provider: sandbox\n")
    config.write_text(text + "sandbox:\n  daytona: {}\n")
    run = WatchRun(
        pkg,
        rows,
        tmp_path / "run",
        "--samples",
        "1",
        env={"GYM_RUNTIME_HOME": str(tmp_path / "home"), **shared_venvs()},
    )
    try:
        run.table(1)
        assert any("'daytona' cannot be given here" in line for line in run.err), "".join(run.err[-30:])
        mark = len(run.err)
        config.write_text(config.read_text().replace("      domain: math\n", "      domain: math\n      note: 2\n"))
        run.table(2)
        at = run.stderr_after(mark, r"restarting ")
        assert run.err[at].rstrip().endswith("restarting arithmetic"), run.err[at]
        assert run.interrupt() == 130, "".join(run.err[-20:])
    finally:
        run.close()
