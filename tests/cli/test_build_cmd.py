"""``gym-runtime build``: a bad Python request is invalid input (exit 1), a missing version a
runtime failure (exit 3, case C17); both fail at plan time, before anything is installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_runtime.cli.main import main
from tests.venvs.conftest import case_pkg, synthetic_pkg


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("GYM_RUNTIME_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("UV_INDEX_URL", "http://127.0.0.1:9/simple")  # never asked: nothing gets that far
    return tmp_path / "home"


def _build(capsys, *argv: str) -> tuple[int, str]:
    code = main(["build", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, err


@pytest.mark.parametrize("request_kind", ["malformed", "missing-path", "not-python"])
def test_bad_python_request_is_invalid_input(tmp_path: Path, capsys, home: Path, request_kind: str) -> None:
    pkg = synthetic_pkg(tmp_path / "pkg", {"acme": ("resources_servers", "# nothing\n")})
    not_python = tmp_path / "not-python"
    not_python.write_text("just text\n")
    request = {
        "malformed": "banana",
        "missing-path": str(tmp_path / "nowhere" / "python3"),
        "not-python": str(not_python),
    }[request_kind]
    code, err = _build(capsys, str(pkg), "--python", request)
    assert code == 1, err
    assert err.startswith("error[GR-BUILD-PYTHON]: acme: python ") and request in err
    assert "(set in the job's --python)" in err and "found " in err
    assert {
        "malformed": "is neither a Python version",
        "missing-path": "does not exist",
        "not-python": "is not a runnable Python interpreter",
    }[request_kind] in err
    assert not (home / "venvs").exists() or not any((home / "venvs").iterdir())


def test_c17_missing_version_stays_a_runtime_failure(tmp_path: Path, capsys, home: Path) -> None:
    pkg = case_pkg("C17", tmp_path / "pkg")
    code, err = _build(capsys, str(pkg))
    assert code == 3 and "error[GR-BUILD-PYTHON]: acme_math: python 3.14" in err
    assert "is not available on this host" in err
