"""``validate`` warns about each file or directory name in a server tree that is not UTF-8
(``GR-PKG-NAME-ENCODING``, gym_runtime/package/odd_names.py): its path with the bytes as ``\\xNN``
and the fix (rename it); the package stays valid. The real CLI on a real package (case C52's,
copied, with names made from raw bytes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.examples.conftest import ROOT
from tests.helpers.cases import CASES

TREE = b"resources_servers/sql_env/"


def test_validate_warns_once_per_name_that_is_not_utf8_with_its_path_escaped_and_the_fix(tmp_path: Path) -> None:
    pkg = shutil.copytree(CASES / "C52" / "pkg", tmp_path / "pkg")
    for p in pkg.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    base = os.fsencode(pkg) + b"/" + TREE
    Path(os.fsdecode(base + b"caf\xe9.txt")).write_text("latin-1 name")
    Path(os.fsdecode(base + b"d\xff")).mkdir()
    Path(os.fsdecode(base + b"d\xff/inner\xfe.txt")).write_text("under a bad directory: not named again")
    Path(os.fsdecode(base + "naïve.txt".encode())).write_text("UTF-8 name: fine")
    done = subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "validate", str(pkg), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["valid"] is True
    named = [w for w in out["warnings"] if w["code"] == "GR-PKG-NAME-ENCODING"]
    assert [w["file"] for w in named] == [
        "resources_servers/sql_env/caf\\xe9.txt",
        "resources_servers/sql_env/d\\xff",
    ]
    assert named[0]["message"].startswith("a file name that is not UTF-8 inside a server tree")
    assert named[1]["message"].startswith("a directory name that is not UTF-8")
    assert "mv $'caf\\xe9.txt' <new name>" in named[0]["hint"] and "rename it" in named[0]["hint"]
    # the block on stderr names each path too
    assert "warning[GR-PKG-NAME-ENCODING] resources_servers/sql_env/caf\\xe9.txt:" in done.stderr
    assert "resources_servers/sql_env/d\\xff:" in done.stderr


def test_a_tree_of_utf8_names_draws_no_name_warning(tmp_path: Path) -> None:
    from gym_runtime.package.odd_names import name_warnings

    tree = tmp_path / "srv"
    (tree / "données").mkdir(parents=True)
    (tree / "données" / "日本.txt").write_text("x")
    assert name_warnings(tmp_path, [("srv", tree)]) == []
