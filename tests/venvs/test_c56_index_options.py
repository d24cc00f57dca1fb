"""Case C56 (tests/cases/data/C56/README.md): ``--extra-index-url`` inside a server's requirements.txt.

The case's index (built by its ``make_index.py``) holds ``torchlite 2.5.1+cpu`` and an old
``jinja2 3.1.2``; the requirements ask ``jinja2>=3.1.5``. uv takes jinja2 only from the first index
that has it, so stage 1 fails where pip would succeed. ``validate`` notes the index line
(``GR-BUILD-INDEX-OPTION``); the build's hint names the line and uv's index strategy, and not the
host's unrelated pip settings; with ``UV_INDEX_STRATEGY=unsafe-best-match`` the build succeeds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gym_runtime.errors import BuildError
from gym_runtime.venvs import build_venvs, plan_venvs
from gym_runtime.venvs.store import read_marker
from tests.examples.conftest import ROOT
from tests.helpers.cases import CASES
from tests.helpers.index import write_simple_index
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import merged_config, synthetic_pkg

CASE = CASES / "C56"
REQS = CASE / "pkg" / "resources_servers" / "torch_env" / "requirements.txt"
PLACEHOLDER = "file://<cases dir>/C56/torchidx/simple"


def test_c56_validate_notes_the_index_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "validate", str(CASE / "pkg"), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (w,) = [w for w in json.loads(done.stdout)["warnings"] if w["code"] == "GR-BUILD-INDEX-OPTION"]
    assert w["file"] == "resources_servers/torch_env/requirements.txt" and w["key"] == "line 2"
    assert "--extra-index-url" in w["message"] and "first index" in w["message"]
    assert "UV_INDEX_STRATEGY=unsafe-best-match" in w["hint"]


def _package(tmp_path: Path) -> tuple[Path, str]:
    """The case's server with its requirements.txt, the index line pointing at the case's index
    (made by make_index.py); and the operator's index (everything the file asks, jinja2 3.1.6)."""
    (tmp_path / "torchidx" / "files").mkdir(parents=True)  # make_index.py writes into it
    subprocess.run([sys.executable, str(CASE / "make_index.py"), str(tmp_path / "torchidx")], check=True, timeout=60)
    text = REQS.read_text().replace(PLACEHOLDER, (tmp_path / "torchidx" / "simple").as_uri())
    files = tmp_path / "files"
    for name, version in (("jinja2", "3.1.6"), ("fastapi", "0.110.0"), ("uvicorn", "0.29.0"), ("pyyaml", "6.0.2")):
        build_wheel(files, name, version)
    pkg = synthetic_pkg(tmp_path / "pkg", {"torch_env": ("resources_servers", text)})
    return pkg, write_simple_index(files, tmp_path / "idx")


def test_c56_the_build_hint_names_the_line_and_uvs_index_strategy(tmp_path, make_settings) -> None:
    pkg, index = _package(tmp_path)
    settings = make_settings(index, env={"PIP_FIND_LINKS": str(tmp_path / "elsewhere")})  # unrelated pip setting
    with pytest.raises(BuildError) as ei:
        build_venvs(plan_venvs(merged_config(pkg), settings), settings)
    e = ei.value
    assert e.extra["stage"] == "stage1" and e.extra["server"] == "torch_env"
    assert "but not at the requested version" in (e.cause or "")  # uv's own words are kept
    assert "resources_servers/torch_env/requirements.txt line 2 `--extra-index-url" in e.hint
    assert "jinja2 was found first on" in e.hint and "UV_INDEX_STRATEGY=unsafe-best-match" in e.hint
    assert "PIP_FIND_LINKS" not in e.hint


def test_c56_with_the_best_match_strategy_the_build_succeeds(tmp_path, make_settings) -> None:
    pkg, index = _package(tmp_path)
    settings = make_settings(index, env={"UV_INDEX_STRATEGY": "unsafe-best-match"})
    v = build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("torch_env")
    installed = read_marker(v.path)["installed"]
    assert installed["jinja2"] == "3.1.6" and installed["torchlite"] == "2.5.1+cpu"
