"""``up --placement ray`` against a cluster started by another Ray version (docs/scale-out.md,
"Supervision across nodes"): the previous Ray minor release from PyPI, in a venv made with real uv
(same Python as the runtime, so only Ray differs), runs a real two-node cluster on loopback. The
daemon fails with ``GR-PLACE-RAY-VERSION`` naming both versions before anything is placed, exit 3,
and leaves no process behind."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from tests.helpers.daemon import descendants, kill_tree, up_process, write_fixture_package
from tests.helpers.gym_package import cache_dir
from tests.helpers.ray_cluster import LocalRayCluster

pytestmark = [pytest.mark.pypi, pytest.mark.slow]
OTHER_RAY = "2.59.0"  # the minor release before the runtime's locked Ray


def other_ray_venv() -> Path:
    """A venv with ``ray==OTHER_RAY`` (and ``psutil``, for the cluster helper) on this Python, made
    once with uv from PyPI and kept under the test cache (a marker written last says it is whole; a
    file lock keeps parallel runs from building it twice)."""
    import uv
    from filelock import FileLock

    venv = cache_dir() / f"ray-{OTHER_RAY}-py{sys.version_info[0]}.{sys.version_info[1]}-venv"
    marker = venv / ".complete"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(venv) + ".lock", timeout=1800):
        if not marker.is_file():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([uv.find_uv_bin(), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
            subprocess.run(
                [
                    uv.find_uv_bin(),
                    "pip",
                    "install",
                    "--quiet",
                    "--python",
                    str(venv / "bin" / "python"),
                    f"ray=={OTHER_RAY}",
                    "psutil",
                ],
                check=True,
                timeout=1800,
            )
            marker.write_text(OTHER_RAY)
    return venv


@pytest.fixture(scope="module")
def old_cluster() -> Iterator[LocalRayCluster]:
    assert ray.__version__ != OTHER_RAY
    c = LocalRayCluster(python=str(other_ray_venv() / "bin" / "python"))
    try:
        c.start({"a": {"num_cpus": 2, "resources": {"node_a": 1}}})
        yield c
    finally:
        c.stop()
    left = c.leftovers()
    assert not left, f"Ray processes left after the cluster stopped: {[p.pid for p in left]}"


def test_a_cluster_of_another_ray_version_is_refused_before_anything_is_placed(old_cluster, tmp_path) -> None:
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {
            "acme_math": {
                "resources_servers": {"acme_math": {"domain": "math", "placement": {"resources": {"node_a": 1}}}}
            }
        },
    )
    before = {p.pid for p in old_cluster.leftovers()}
    proc = up_process(
        pkg,
        tmp_path,
        "--placement",
        "ray",
        "--ray-address",
        old_cluster.address,
        env={**old_cluster.env, "GYM_RUNTIME_HOME": str(tmp_path / "home")},
    )
    try:
        out, err = proc.communicate(timeout=300)
        kids = descendants(proc.pid)
    finally:
        kill_tree(proc)
    assert proc.returncode == 3, err
    assert out == "" and "Traceback" not in err
    assert "GR-PLACE-RAY-VERSION" in err and old_cluster.address in err
    assert OTHER_RAY in err and ray.__version__ in err  # both versions, the cluster's and ours
    assert "nothing was placed" in err and "placing" not in err
    assert kids == []
    assert {p.pid for p in old_cluster.leftovers()} <= before  # no worker, actor or driver of ours on any node
