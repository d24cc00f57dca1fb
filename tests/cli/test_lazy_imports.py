"""The CLI imports only what the command needs: parsing arguments (``--help``, a usage error) and
``status`` never load the config stack (OmegaConf, pydantic), the daemon (Starlette, uvicorn, the
supervisor, the venv builder) or rich. Start-up time itself is measured by ``bench/cli.py``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "omegaconf",
    "pydantic",
    "fastapi",
    "starlette",
    "uvicorn",
    "rich",
    "httpx",
    "yaml",
    "psutil",
    "asyncio",
    "gym_runtime.config",
    "gym_runtime.package",
    "gym_runtime.venvs",
    "gym_runtime.runtime.bringup",
    "gym_runtime.supervise.supervisor",
    "sandbox",
)
PROBE = """
import json, sys
from gym_runtime.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(k for k, v in sys.modules.items() if v is not None)), file=sys.stderr)  # None: not imported
"""


def _loaded(*argv: str) -> set[str]:
    r = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120)
    return set(json.loads(r.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["status", "--help"],
        ["validate", "--help"],
        ["config", "--help"],
        ["up", "--help"],
        ["dry-run", "--help"],
        ["build", "--help"],
        ["nope"],
    ],
)
def test_parsing_loads_nothing_heavy(argv: list[str]) -> None:
    loaded = _loaded(*argv)
    assert not {m for m in loaded for h in HEAVY if m == h or m.startswith(h + ".")}


def test_status_without_a_daemon_loads_nothing_heavy(tmp_path) -> None:
    r = subprocess.run(
        [sys.executable, "-c", PROBE, "status"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "GYM_RUNTIME_HOME": str(tmp_path)},
    )
    loaded = set(json.loads(r.stderr.strip().splitlines()[-1]))
    assert not {m for m in loaded for h in HEAVY if m == h or m.startswith(h + ".")}


def test_up_loads_the_daemon_without_httpx_s_command_line_or_uvicorn(tmp_path) -> None:
    """``up`` imports the daemon's bring-up with httpx but not httpx's own command line (click, rich,
    pygments: ~90 modules the daemon never runs), and the job's policy values take a free port without
    uvicorn, which only the daemon's listeners import once they start (docs/performance.md)."""
    loaded = _loaded("up", str(tmp_path / "no-such-package"))
    assert {"gym_runtime.runtime.bringup", "gym_runtime.policy.values", "httpx"} <= loaded
    cli = ("httpx._main", "click", "rich", "pygments", "uvicorn", "gym_runtime.serving")
    assert not {m for m in loaded for h in cli if m == h or m.startswith(h + ".")}
