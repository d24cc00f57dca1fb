"""A plan built again after its venv was removed installs the resolution recorded at its first build,
offline from the uv cache; without a usable record, or when uv cannot do it offline, stage 1
resolves against the index as before (gym_runtime/venvs/resolutions.py). Real uv and a real loopback
index, which records every request."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from gym_runtime.venvs import build_venvs, plan_venvs, resolutions
from tests.helpers.index import SimpleIndex
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import merged_config, synthetic_pkg


def _version(python: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import tinyparse; print(tinyparse.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _build(pkg: Path, settings):
    venvs = build_venvs(plan_venvs(merged_config(pkg), settings), settings)
    return venvs.for_instance("acme_math")


def _first_build(tmp_path: Path, index_url: str, make_settings):
    """A package whose server needs ``judgekit`` (and so ``tinyparse``), built once: the package,
    its settings, the venv and the path of the resolution recorded for it."""
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme_math": ("resources_servers", "judgekit==1.0.0\n")})
    settings = make_settings(index_url)
    first = _build(pkg, settings)
    return pkg, settings, first, resolutions.record_path(settings.resolutions_dir, first.digest)


@pytest.fixture
def index_files(tmp_path: Path) -> Path:
    d = tmp_path / "index-files"
    build_wheel(d, "judgekit", "1.0.0", requires=["tinyparse>=0.3"])
    build_wheel(d, "tinyparse", "0.3.0")
    return d


def test_a_rebuilt_plan_replays_its_recorded_resolution_offline(
    tmp_path: Path, index_files: Path, make_settings
) -> None:
    with SimpleIndex(index_files) as idx:
        pkg, settings, first, record = _first_build(tmp_path, idx.url, make_settings)
        assert _version(first.python) == "0.3.0"
        data = json.loads(record.read_text())
        assert data["digest"] == first.digest and data["installed"]["tinyparse"] == "0.3.0"
        build_wheel(index_files, "tinyparse", "0.4.0")  # a newer release appears on the index
        stage1_log = settings.logs_dir / "build" / f"acme_math-{first.digest[:12]}.stage1.log"

        shutil.rmtree(settings.venv_dir)  # a fresh pod: no venvs, the uv cache kept
        asked = len(idx.requests)
        again = _build(pkg, settings)
        assert not again.reused and again.digest == first.digest
        assert _version(again.python) == "0.3.0"  # the recorded resolution, not the newer release
        assert len(idx.requests) == asked, "an offline replay must not touch the index"
        log = stage1_log.read_text()
        assert "--offline -c" in log and "gym-runtime-recorded.txt" in log and "tinyparse==0.3.0" in log
        assert "resolving against the index instead" not in log

        record.unlink()  # what the docs say to do to resolve a plan anew
        shutil.rmtree(settings.venv_dir)
        fresh = _build(pkg, settings)
        assert _version(fresh.python) == "0.4.0" and len(idx.requests) > asked
    assert json.loads(record.read_text())["installed"]["tinyparse"] == "0.4.0"  # recorded again


def test_a_record_uv_cannot_install_offline_falls_back_to_the_index(
    tmp_path: Path, index_files: Path, make_settings
) -> None:
    with SimpleIndex(index_files) as idx:
        pkg, settings, first, record = _first_build(tmp_path, idx.url, make_settings)
        data = json.loads(record.read_text())
        data["installed"]["tinyparse"] = "0.9.9"  # in no cache: uv cannot install it offline
        record.write_text(json.dumps(data))
        shutil.rmtree(settings.venv_dir)
        again = _build(pkg, settings)
        assert _version(again.python) == "0.3.0"
    log = (settings.logs_dir / "build" / f"acme_math-{first.digest[:12]}.stage1.log").read_text()
    assert "could not be installed offline" in log and "resolving against the index instead" in log
    assert json.loads(record.read_text())["installed"]["tinyparse"] == "0.3.0"  # the record is mended


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        json.dumps({"digest": "another", "installed": {"tinyparse": "0.3.0"}}),
        json.dumps({"digest": "d" * 64, "installed": {"Tiny_Parse": "0.3.0"}}),  # not a canonical name
        json.dumps({"digest": "d" * 64, "installed": {"tinyparse": "0.3; rm -rf /"}}),  # not a version
        json.dumps({"digest": "d" * 64, "installed": ["tinyparse==0.3.0"]}),
        json.dumps({"digest": "d" * 64, "installed": {}}),
    ],
)
def test_a_record_that_is_not_well_formed_is_ignored(tmp_path: Path, text: str) -> None:
    resolutions.record_path(tmp_path, "d" * 64).write_text(text)
    assert resolutions.recorded(tmp_path, "d" * 64) is None


def test_only_the_most_recently_used_records_are_kept(tmp_path: Path) -> None:
    digests = [f"{i:02d}" * 32 for i in range(5)]
    for i, d in enumerate(digests):
        resolutions.record(tmp_path, d, "3.12.1", {"tinyparse": "0.3.0"}, keep=3)
        os.utime(resolutions.record_path(tmp_path, d), (time.time() - 100 + i, time.time() - 100 + i))
    assert resolutions.recorded(tmp_path, digests[2]) == {"tinyparse": "0.3.0"}  # used: now the newest
    resolutions.record(tmp_path, "ff" * 32, "3.12.1", {"tinyparse": "0.3.0"}, keep=3)
    kept = sorted(p.stem for p in tmp_path.glob("*.json"))
    assert kept == sorted(d[:24] for d in (digests[2], digests[4], "ff" * 32))
