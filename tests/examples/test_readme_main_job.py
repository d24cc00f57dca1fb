"""The README's first command, run as a new user would: a clean clone, a fresh project venv, an
empty uv cache and no gym-runtime state; it must end with the reward table (issue 7)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples.conftest import ROOT


def first_command() -> str:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block, "README.md has no bash block"
    return block.group(1).strip().splitlines()[0]


@pytest.mark.pypi
@pytest.mark.slow
def test_first_readme_command_on_a_clean_clone(tmp_path: Path) -> None:
    command = first_command()
    assert "dry-run examples/" in command
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT"))}
    venv_bin = str(Path(sys.prefix) / "bin")  # the test's own venv: a new user has none
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    env.update(UV_CACHE_DIR=str(tmp_path / "uv-cache"), GYM_RUNTIME_HOME=str(tmp_path / "home"), COLUMNS="100")
    done = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    tail = done.stdout.strip().splitlines()
    assert any("no GRPO signal" in line for line in tail) and any(line.startswith("rows: 6") for line in tail)
    assert (clone / ".venv").is_dir(), "the command made its own project venv in the clone"
