"""An index given to pip is one uv never reads (``PIP_*`` variables, ``pip.conf``; the runtime scrubs
``PIP_*`` too): when stage 1 cannot find a requirement on the index, the hint says so and names uv's
variable (``gym_runtime/venvs/pip_settings.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_runtime.errors import BuildError
from gym_runtime.venvs import build_venvs, plan_venvs
from gym_runtime.venvs.pip_settings import ignored_pip_indexes
from tests.venvs.conftest import merged_config, synthetic_pkg


def _isolated(tmp_path: Path, **env: str) -> dict[str, str]:
    return {
        "HOME": str(tmp_path / "h"),
        "XDG_CONFIG_HOME": str(tmp_path / "x"),
        "XDG_CONFIG_DIRS": str(tmp_path / "d"),
        **env,
    }


def test_variables_and_config_files_are_found(tmp_path: Path) -> None:
    (tmp_path / "x" / "pip").mkdir(parents=True)
    (tmp_path / "x" / "pip" / "pip.conf").write_text("[install]\nfind-links = /srv/wheels\n[global]\ntimeout = 5\n")
    found = ignored_pip_indexes(_isolated(tmp_path, PIP_INDEX_URL="https://mirror.acme.invalid/simple"))
    assert [(s.where, s.value, s.uv) for s in found] == [
        ("PIP_INDEX_URL", "https://mirror.acme.invalid/simple", "UV_DEFAULT_INDEX"),
        (f"{tmp_path}/x/pip/pip.conf [install] find-links", "/srv/wheels", "UV_FIND_LINKS"),
    ]
    (tmp_path / "x" / "pip" / "pip.conf").write_text("not an ini file\n")
    assert ignored_pip_indexes(_isolated(tmp_path)) == []


def test_a_failed_resolution_names_the_pip_index_uv_ignored(tmp_path: Path, make_settings) -> None:
    """(The suite runs without the caller's pip settings: tests/conftest.py.)"""
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme_math": ("resources_servers", "acme-private-lib==1.0\n")})
    settings = make_settings(env=_isolated(tmp_path, PIP_INDEX_URL="https://mirror.acme.invalid/simple"))
    with pytest.raises(BuildError) as ei:
        build_venvs(plan_venvs(merged_config(pkg), settings), settings)
    e = ei.value
    assert e.code == "GR-BUILD-MISSING" and "acme-private-lib" in e.message
    assert (
        "; note: PIP_INDEX_URL=https://mirror.acme.invalid/simple (uv ignores it; uv reads UV_DEFAULT_INDEX)" in e.hint
    )
    assert "give the index to uv instead, e.g. UV_DEFAULT_INDEX=<url>" in e.hint
    settings = make_settings(env=_isolated(tmp_path))  # without one, the hint is what it was
    with pytest.raises(BuildError) as ei:
        build_venvs(plan_venvs(merged_config(pkg), settings), settings)
    assert "PIP_INDEX_URL" not in ei.value.hint


def test_uv_trust_settings_reach_uv_both_names() -> None:
    """How uv trusts the index's certificate is the caller's to choose: ``UV_SYSTEM_CERTS`` (uv >= 0.13's
    name, which ``./uvw`` sets) was scrubbed from the builds' uv, so a build behind a TLS-inspecting
    proxy failed with ``invalid peer certificate: UnknownIssuer`` after ``./uvw`` itself had worked."""
    from gym_runtime.venvs.uvrun import make_env

    uv_env = make_env(
        {
            "UV_SYSTEM_CERTS": "1",
            "UV_NATIVE_TLS": "true",
            "UV_SOMETHING_ELSE": "x",
            "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
            "PATH": "/usr/bin:/bin",
        },
        None,
    )
    assert uv_env.env["UV_SYSTEM_CERTS"] == "1" and uv_env.env["UV_NATIVE_TLS"] == "true"
    assert uv_env.env["SSL_CERT_FILE"] == "/etc/ssl/certs/ca-certificates.crt"
    assert "UV_SOMETHING_ELSE" not in uv_env.env
