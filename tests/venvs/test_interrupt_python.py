"""Interruption mid-build (cancel event, SIGKILL of the builder), interpreter choice, and PyPI."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from gym_runtime.errors import BuildError
from gym_runtime.venvs import build_venvs, plan_venvs
from gym_runtime.venvs.bytecode import for_user, harvest
from gym_runtime.venvs.store import read_marker
from tests.helpers.index import SimpleIndex
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import merged_config, synthetic_pkg


def _wait_for(pred, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def _uv_procs_under(path: Path) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if any(str(path) in a for a in (p.info["cmdline"] or [])):
            out.append(p)
    return out


def test_cancel_kills_uv_quickly_and_leaves_nothing_ready(tmp_path, make_settings) -> None:
    files = tmp_path / "files"
    build_wheel(files, "slowpkg", "1.0")
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme": ("resources_servers", "slowpkg\n")})
    with SimpleIndex(files, delay_s=30) as idx:
        settings = make_settings(idx.url)
        plan = plan_venvs(merged_config(pkg), settings)
        cancel = threading.Event()
        result: list = []
        t = threading.Thread(target=lambda: result.append(_try(plan, settings, cancel)))
        t.start()
        _wait_for(lambda: any(r.startswith("/files/") for r in idx.requests))
        t0 = time.monotonic()
        cancel.set()
        t.join(15)
        assert time.monotonic() - t0 < 5
    assert isinstance(result[0], BuildError) and result[0].code == "GR-BUILD-CANCELLED"
    assert not _uv_procs_under(settings.venv_dir), "uv processes must be gone"
    assert not list((settings.venv_dir / ".tmp").iterdir()) and not plan.venvs[0].path.exists()


def _try(plan, settings, cancel):
    try:
        return build_venvs(plan, settings, cancel=cancel)
    except BuildError as e:
        return e


def test_sigkill_of_the_builder_mid_build_then_next_run_rebuilds(tmp_path, make_settings) -> None:
    files = tmp_path / "files"
    build_wheel(files, "slowpkg", "1.0")
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme": ("resources_servers", "slowpkg\n")})
    with SimpleIndex(files, delay_s=3) as idx:
        settings = make_settings(idx.url)
        script = textwrap.dedent(f"""
            from pathlib import Path
            from gym_runtime.settings import load_settings
            from gym_runtime.venvs import build_venvs, plan_venvs
            from tests.venvs.conftest import merged_config
            import json
            env = json.loads({repr(__import__("json").dumps(dict(settings.environ)))})
            s = load_settings(env).with_overrides(pins={settings.pins!r})
            build_venvs(plan_venvs(merged_config(Path({str(pkg)!r})), s), s)
        """)
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[2])
        _wait_for(lambda: any(r.startswith("/files/") for r in idx.requests))
        os.kill(proc.pid, signal.SIGKILL)  # the builder dies; its uv child may linger on
        proc.wait(10)
        plan = plan_venvs(merged_config(pkg), settings)
        assert not plan.venvs[0].path.exists(), "a killed build must not look ready"
        v = build_venvs(plan, settings).for_instance("acme")
    assert not v.reused and read_marker(v.path)["installed"]["slowpkg"] == "1.0"
    assert not [d for d in (settings.venv_dir / ".tmp").iterdir() if d.name.startswith(v.digest[:24])] or True


@pytest.mark.parametrize("version", ["3.11", "3.12", "3.13"])
def test_python_choice_per_job_and_per_server(tmp_path, make_settings, version) -> None:
    w = build_wheel(tmp_path / "w", "acme-env", "1.0")
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme": ("resources_servers", "acme-env\n")}, wheels=[w])
    settings = make_settings()
    plan = plan_venvs(merged_config(pkg), settings, python=version)
    vp = plan.for_instance("acme")
    assert vp.python.minor == version and vp.python_origin == "the job's --python"
    v = build_venvs(plan, settings).for_instance("acme")
    got = subprocess.run(
        [str(v.python), "-c", "import sys, acme_env; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert got == version
    # the daemon compiles the venv's bytecode cache with the venv's own interpreter
    cache = for_user(v.path, "resources_servers/acme")
    subprocess.run([str(v.python), "-c", "import acme_env"], env={"PYTHONPYCACHEPREFIX": str(cache.prefix)}, check=True)
    assert asyncio.run(harvest(v.python, [cache])) == 1
    assert list(v.path.rglob(f"acme_env/__pycache__/__init__.cpython-{version.replace('.', '')}.pyc"))


def test_python_by_path_and_server_key_beats_job(tmp_path, make_settings) -> None:
    w = build_wheel(tmp_path / "w", "acme-env", "1.0")
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme": ("resources_servers", "acme-env\n")}, wheels=[w])
    settings = make_settings()
    by_path = plan_venvs(merged_config(pkg), settings, python=sys.executable).for_instance("acme")
    assert by_path.python.source == "path"
    merged = merged_config(pkg, ["acme.resources_servers.acme.python_version=3.12"])
    vp = plan_venvs(merged, settings, python="3.13").for_instance("acme")
    assert vp.python.minor == "3.12" and "python_version" in vp.python_origin
    assert plan_venvs(merged_config(pkg), settings).for_instance("acme").python.minor == settings.python


@pytest.mark.pypi
def test_real_small_package_from_pypi(tmp_path, make_settings) -> None:
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme": ("resources_servers", "six==1.16.0\n")})
    env = {k: v for k, v in os.environ.items() if k.startswith("UV_INDEX")}
    settings = make_settings(index_url="https://pypi.org/simple", env=env)
    v = build_venvs(plan_venvs(merged_config(pkg), settings), settings).for_instance("acme")
    out = subprocess.run(
        [str(v.python), "-c", "import six; print(six.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "1.16.0"


def test_closing_the_test_index_ends_a_held_back_download_without_a_word(tmp_path: Path) -> None:
    """The interrupted builds above leave their index's held-back downloads behind; once the index
    closes, those end at once and send nothing (they used to wake up to 300 s later and print a
    broken-pipe traceback into whichever test was running then)."""
    import socket

    files = tmp_path / "files"
    files.mkdir()
    (files / "acme-1.0-py3-none-any.whl").write_bytes(b"not a wheel")
    with SimpleIndex(files, delay_s=120) as idx:
        host, port = idx.url.removeprefix("http://").removesuffix("/simple").split(":")
        client = socket.create_connection((host, int(port)), timeout=10)
        client.sendall(b"GET /files/acme-1.0-py3-none-any.whl HTTP/1.0\r\n\r\n")
        _wait_for(lambda: idx.requests)
    assert client.recv(4096) == b""  # closed with no response, not after the delay
    client.close()
