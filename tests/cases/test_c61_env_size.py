"""Case C61 (tests/cases/data/C61/README.md) as its run script does it: ``dry-run`` of the case's
package, whose resources server ``rubric_env`` holds an inline rubric in its config block, with one
instance of the tree (each server exec'd) and with two (the tree's venv gets a preloaded parent and
its servers are forked, so they used to start and every program they ran failed: reward 0.000, no
error).

Owed: every server gets the whole merged config in ``NEMO_GYM_CONFIG_DICT``, and NeMo Gym servers
read it from that variable alone, so a config past Linux's 131,072 bytes per environment string is
refused before any venv build with one ``GR-CONFIG-ENV-TOO-BIG`` block (exit 1) naming the servers,
the size, the limit and the key that makes it big; a 60 KB rubric (the control) runs and its
server's child process starts; under ``dry-run --watch`` an edit past the limit is refused the same
way and the running environment keeps its config. The check itself: tests/daemon/test_env_limit.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples.conftest import dry_run
from tests.helpers.cases import CASES
from tests.helpers.watch import WatchRun, watched_quickstart

C61 = CASES / "C61"
ITEM = "  - 'criterion {i:05d}: the answer states the final value plainly and explains the single step that produces it, without hedging'\n"


def _package(dest: Path, kb: int, instances: int) -> Path:
    """The package ``make.sh KB DEST INSTANCES`` lays out (its rubric recipe, then common/make_pkg.py)."""
    recipe = (C61 / "make.sh").read_text()
    assert "items = kb * 1024 // 134" in recipe and "make_pkg.py" in recipe
    rubric = dest.parent / f"rubric-{kb}.yaml"
    rubric.write_text("rubric:\n" + "".join(ITEM.format(i=i) for i in range(kb * 1024 // 134)))
    pkg = dest / f"c61-{kb}-{instances}"
    make = CASES / "common" / "make_pkg.py"
    subprocess.run(
        [sys.executable, str(make), str(pkg), "rubric_env", str(C61 / "app.py"), str(instances), str(rubric)],
        check=True,
        capture_output=True,
    )
    return pkg


@pytest.mark.parametrize("instances", [1, 2])
def test_c61_a_config_past_the_kernel_limit_is_refused_before_any_build(tmp_path: Path, instances: int) -> None:
    pkg = _package(tmp_path, 150, instances)
    run = dry_run(pkg, C61 / "rows.jsonl", "--samples", "1", "--isolation", "none", timeout=300)
    assert run.code == 1, run.stderr[-3000:]
    blocks = re.findall(r"^error\[[A-Z-]+\]", run.stderr, re.M)
    assert blocks == ["error[GR-CONFIG-ENV-TOO-BIG]"], run.stderr[-3000:]
    first = run.stderr[run.stderr.index("error[") :].splitlines()[0]
    names = ["rubric_env", "rubric_env_agent", "policy_model"] + (["rubric_env_2"] if instances == 2 else [])
    for name in names:  # every server gets the whole config, rubric_env_2 included
        assert f"'{name}'" in first, first
    size = int(re.search(r"NEMO_GYM_CONFIG_DICT of ([\d,]+) bytes", first).group(1).replace(",", ""))
    assert 160_000 < size < 165_000, first
    assert "over 131,072 bytes (MAX_ARG_STRLEN" in first
    assert "rubric_env.resources_servers.rubric_env.rubric (" in run.stderr
    assert "bytes, from resources_servers/rubric_env/configs/rubric_env.yaml)" in run.stderr
    assert "Traceback" not in run.stderr and "Argument list too long" in run.stderr
    assert "venv" not in run.stderr.split("error[")[0], "refused only after building"


@pytest.mark.pypi
@pytest.mark.slow
def test_c61_the_control_under_the_limit_runs_and_its_child_starts(tmp_path: Path) -> None:
    pkg = _package(tmp_path, 60, 1)
    run = dry_run(pkg, C61 / "rows.jsonl", "--samples", "1", "--isolation", "none", timeout=600)
    assert run.code == 0, run.stderr[-3000:]
    assert re.search(r"rollouts: 1\s+succeeded: 1\s+failed: 0", run.stdout), run.stdout[-2000:]
    assert "mean reward: 1.000" in run.stdout


@pytest.mark.pypi
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_c61_a_watched_edit_past_the_limit_is_refused_and_the_environment_keeps_running(tmp_path: Path) -> None:
    pkg, rows = watched_quickstart(tmp_path)
    config = pkg / "resources_servers" / "example_arithmetic" / "configs" / "arithmetic.yaml"
    good = config.read_text()
    rubric = "      rubric:\n" + "".join("      " + ITEM.format(i=i) for i in range(150 * 1024 // 134))
    run = WatchRun(pkg, rows, tmp_path / "run", "--samples", "1", env={"GYM_RUNTIME_HOME": str(tmp_path / "home")})
    try:
        run.table(1)
        mark = len(run.err)
        config.write_text(good.replace("      domain: math\n", "      domain: math\n" + rubric, 1))
        at = run.stderr_after(mark, r"error\[GR-CONFIG-ENV-TOO-BIG\]")
        refused = "".join(run.err[at:])
        assert (
            "NEMO_GYM_CONFIG_DICT of" in refused
            and "arithmetic.resources_servers.example_arithmetic.rubric (" in refused
        )
        run.stderr_after(at, r"the environment keeps running as it was")
        assert not any(line.startswith("restarting") or "restarting " in line for line in run.err[mark:]), run.err[
            mark:
        ]
        config.write_text(good.replace("      domain: math\n", "      domain: math\n      note: 2\n", 1))
        run.table(2)  # the next good edit applies: the servers ran the whole time
        assert run.interrupt() == 130, "".join(run.err[-20:])
    finally:
        run.close()
