"""Case C60 (tests/cases/data/C60/README.md): unquoted ``yes`` / ``no`` / ``off`` become booleans.

``pkg`` has ``labels: [yes, no]`` and ``unknown_label: off``; ``pkg_quoted`` the fix. YAML's
meaning is kept (Gym's parser reads the same), but ``validate`` and ``config`` warn
(``GR-CONFIG-YAML-BOOLEAN``) naming the file, the key path, the line and the quoted fix where such
a word stands in a list of text or in a key the server's config class declares to take text.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gym_runtime.config import PolicyValues, build_config
from gym_runtime.config.yaml_booleans import words
from gym_runtime.package import load_package
from tests.examples.conftest import ROOT
from tests.helpers.cases import CASES

CASE = CASES / "C60"
CONFIG = "resources_servers/label_env/configs/label_env.yaml"
LABELS = "label_env.resources_servers.label_env.labels"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_c60_validate_names_file_key_line_and_the_quoted_fix() -> None:
    done = cli("validate", str(CASE / "pkg"), "--json")
    assert done.returncode == 0, done.stderr
    (w,) = [w for w in json.loads(done.stdout)["warnings"] if w["code"] == "GR-CONFIG-YAML-BOOLEAN"]
    assert w["file"] == CONFIG and w["key"] == LABELS
    assert "line 7" in w["message"] and "yes -> true, no -> false" in w["message"]
    assert w["hint"] == 'quote them: labels: ["yes", "no"]'


def test_c60_config_keeps_yamls_meaning_and_warns_on_stderr() -> None:
    done = cli(
        "config", str(CASE / "pkg"), "--policy-base-url", "http://127.0.0.1:9/v1", "--policy-model-name", "m", "--json"
    )
    assert done.returncode == 0, done.stderr
    block = json.loads(done.stdout)["config"]["label_env"]["resources_servers"]["label_env"]
    assert block["labels"] == [True, False] and block["unknown_label"] is False  # what Gym's parser gives too
    assert f"warning[GR-CONFIG-YAML-BOOLEAN] {CONFIG}: {LABELS}: line 7" in done.stderr


def test_c60_the_quoted_fix_draws_no_warning() -> None:
    done = cli("validate", str(CASE / "pkg_quoted"), "--json")
    assert done.returncode == 0, done.stderr
    assert "GR-CONFIG-YAML-BOOLEAN" not in done.stdout + done.stderr


def test_c60_an_override_replacing_the_list_draws_no_warning() -> None:
    merged = build_config(
        load_package(CASE / "pkg"), [f"{LABELS}=[maybe,never]"], PolicyValues("http://127.0.0.1:9/v1", "EMPTY", "m")
    )
    assert [w for w in merged.warnings if w.code == "GR-CONFIG-YAML-BOOLEAN"] == []


# The case's server with a pydantic config class (read statically, never run): a key declared to take
# text gets the warning even alone (`unknown_label: off`).
CONFIG_CLASS = """
from pydantic import BaseModel


class LabelConfig(BaseModel):
    labels: list[str]
    unknown_label: str | None = None
    verbose: bool = False


class LabelServer:
    config: LabelConfig


if __name__ == "__main__":
    LabelServer.run_webserver()
"""


def test_c60_a_key_declared_str_is_warned_about_alone(tmp_path: Path) -> None:
    pkg = shutil.copytree(CASE / "pkg", tmp_path / "pkg")
    app = pkg / "resources_servers" / "label_env" / "app.py"
    app.chmod(0o644)
    app.write_text(app.read_text() + CONFIG_CLASS)
    cfg = pkg / CONFIG
    cfg.chmod(0o644)
    cfg.write_text(cfg.read_text().replace("domain: other", "domain: other\n      verbose: on"))
    merged = build_config(load_package(pkg), policy=PolicyValues("http://127.0.0.1:9/v1", "EMPTY", "m"))
    found = {w.key: w for w in merged.warnings if w.code == "GR-CONFIG-YAML-BOOLEAN"}
    assert set(found) == {LABELS, "label_env.resources_servers.label_env.unknown_label"}  # not `verbose: on`
    w = found["label_env.resources_servers.label_env.unknown_label"]
    assert w.file == CONFIG and "line 9" in w.message and "LabelConfig.unknown_label: str | None" in w.message
    assert w.hint == 'quote it: unknown_label: "off"'


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ("a: [yes, no]", [("a", 0, "yes"), ("a", 1, "no")]),
        ("a: [YES, Off, maybe]", [("a", 0, "YES"), ("a", 1, "Off")]),
        ("a: ['yes', \"no\"]", []),
        ("a: [true, false, True]", []),
        ("a: {b: On}", [("a", "b", "On")]),
        ("a:\n  - x\n  - - no\n", [("a", 1, 0, "no")]),
    ],
)
def test_c60_words_are_read_from_the_source_token(text: str, flagged: list[tuple]) -> None:
    assert [(*w.path, w.token) for w in words(text)] == flagged


def test_c60_a_list_mixing_booleans_and_numbers_is_not_text() -> None:
    assert [w.texty for w in words("a: [yes, 3]")] == [False]


@pytest.mark.parametrize("named", ["resources_servers/label_env/data/labels.yaml", "data/labels.yaml"])
def test_c60_a_yaml_data_file_the_config_names_is_read_too(tmp_path: Path, named: str) -> None:
    """The same label set moved into a data file the server opens itself (named relative to the
    package root or to the server's directory): YAML 1.1 reads it the same way in the server."""
    pkg = Path(shutil.copytree(CASE / "pkg_quoted", tmp_path / "pkg"))
    data = pkg / "resources_servers/label_env/data/labels.yaml"
    data.parent.mkdir()
    data.write_text("# the grader's answer key\nlabels:\n  - yes\n  - no\nregions: [NO, SE]\ncounts: [1, 2]\n")
    config = pkg / CONFIG
    config.write_text(config.read_text().replace("      domain:", f"      labels_file: {named}\n      domain:", 1))
    merged = build_config(load_package(pkg), [], PolicyValues("http://127.0.0.1:9/v1", "k", "m"))
    found = sorted((w.key, w.message, w.hint) for w in merged.warnings if w.code == "GR-CONFIG-YAML-BOOLEAN")
    assert [(k, h) for k, _, h in found] == [
        ("labels", 'quote them: labels: ["yes", "no"]'),
        ("regions", 'quote them: regions: ["NO", "SE"]'),
    ]
    assert all(
        w.file == "resources_servers/label_env/data/labels.yaml"
        for w in merged.warnings
        if w.code == "GR-CONFIG-YAML-BOOLEAN"
    )
    assert "a data file the config names: label_env.resources_servers.label_env.labels_file" in found[0][1]
    assert "line 3" in found[0][1]
