"""Server trees importing what the pinned Gym release lacks are found before any build
(``GR-SDK-IMPORT``, ``gym_runtime/gym_release/imports.py``): every ``file:line``, what is missing, the
releases that have it, the fix. The failure it prevents: 0.7.0 trees run with the 0.4.0 SDK built
fine, then every server crashed at import (``cannot import name 'start_model_execution' from
'nemo_gym.base_responses_api_model'``)."""

from __future__ import annotations

import json
from pathlib import Path

from gym_runtime.cli.main import main
from tests.helpers.gym_python import current_gym_python  # noqa: F401 - a fixture
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import synthetic_pkg

APP = """import json
from nemo_gym.base_responses_api_model import SimpleResponsesAPIModel, start_model_execution

try:
    from nemo_gym.not_in_any_release import optional_feature
except ImportError:
    optional_feature = None


def later():
    import nemo_gym.episode_types
    from nemo_gym.server_utils import *
"""


def sdk_package(tmp_path: Path, wheels: list[Path] | None = None) -> Path:
    pkg = synthetic_pkg(
        tmp_path / "pkg", {"acme_model": ("responses_api_models", "-e nemo-gym[dev] @ ../../\n")}, wheels=wheels
    )
    (pkg / "responses_api_models" / "acme_model" / "app.py").write_text(APP)
    (pkg / "responses_api_models" / "acme_model" / "helpers").mkdir()
    (pkg / "responses_api_models" / "acme_model" / "helpers" / "plain.py").write_text("import os\n")
    return pkg


def _validate(capsys, pkg: Path, *flags: str) -> tuple[int, dict, str]:
    code = main(["validate", str(pkg), "--json", *flags])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, json.loads(out), err


def test_trees_of_a_newer_release_against_an_older_pin(tmp_path: Path, capsys, monkeypatch, current_gym_python) -> None:
    monkeypatch.setenv("GYM_RUNTIME_PIN_NEMO_GYM", "0.4.0")
    pkg = sdk_package(tmp_path)
    code, doc, _ = _validate(capsys, pkg)
    assert code == 1
    found = [v for v in doc["error"]["violations"] if v["code"] == "GR-SDK-IMPORT"]
    app = "responses_api_models/acme_model/app.py"
    assert [(v["file"], v["key"]) for v in found] == [(app, "line 2"), (app, "line 11")]
    assert found[0]["message"] == (
        "imports start_model_execution from nemo_gym.base_responses_api_model, which "
        "nemo-gym 0.4.0 does not define; nemo-gym 0.7.0 has it"
    )
    assert found[1]["message"] == (
        "imports nemo_gym.episode_types: nemo-gym 0.4.0 has no module nemo_gym.episode_types; nemo-gym 0.7.0 has it"
    )
    assert all("GYM_RUNTIME_PIN_NEMO_GYM=0.7.0" in v["hint"] for v in found)
    monkeypatch.delenv("GYM_RUNTIME_PIN_NEMO_GYM")  # the current release has all of it
    code, doc, err = _validate(capsys, pkg)
    assert code == 0 and doc["valid"], err


def test_build_stops_before_any_venv(tmp_path: Path, capsys, monkeypatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("GYM_RUNTIME_HOME", str(home))
    monkeypatch.setenv("GYM_RUNTIME_PIN_NEMO_GYM", "0.4.0")
    monkeypatch.setenv("UV_INDEX_URL", "http://127.0.0.1:1/simple")  # never asked: nothing gets that far
    code = main(["build", str(sdk_package(tmp_path))])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(
        "error[GR-SDK-IMPORT]: 2 imports of the Gym SDK in the package's server "
        "trees are missing from nemo-gym 0.4.0 (set by GYM_RUNTIME_PIN_NEMO_GYM; "
        "checked against the index of nemo-gym 0.4.0)"
    )
    assert not any((home / "venvs").glob("*/.gym-runtime-ready"))


def test_a_release_without_an_index_is_not_checked_and_says_so(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("GYM_RUNTIME_PIN_NEMO_GYM", "0.2.0")
    code, doc, err = _validate(capsys, sdk_package(tmp_path))
    assert code == 0 and doc["notes"] == [
        "the server trees' imports of the Gym SDK were not checked: the runtime has no index of nemo-gym 0.2.0"
    ]


def test_a_vendored_sdk_wheel_is_indexed_from_the_wheel_itself(tmp_path: Path, capsys) -> None:
    """A wheels-v1 package vendoring ``nemo_gym-0.7.0`` is checked against that wheel's sources, not
    against the committed index of 0.7.0 (this build of it lacks ``start_model_execution``)."""
    sdk = build_wheel(
        tmp_path / "sdk",
        "nemo-gym",
        "0.7.0",
        files={
            "nemo_gym/__init__.py": "",
            "nemo_gym/base_responses_api_model.py": "class SimpleResponsesAPIModel:\n    pass\n",
            "nemo_gym/episode_types.py": "",
            "nemo_gym/server_utils.py": "",
        },
    )
    pip = build_wheel(tmp_path / "sdk", "pip", "24.0")
    code, doc, _ = _validate(capsys, sdk_package(tmp_path, wheels=[sdk, pip]))
    (v,) = [v for v in doc["error"]["violations"] if v["code"] == "GR-SDK-IMPORT"]
    assert code == 1 and v["key"] == "line 2" and "start_model_execution" in v["message"]
    assert doc["gym_release"]["source"] == "wheels/nemo_gym-0.7.0-py3-none-any.whl"
