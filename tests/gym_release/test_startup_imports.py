"""The committed start-up lists: a release uses the list of the newest release of its line at or
below it, a line without one seeds nothing, and a list holds what a preloaded parent reads first
in the order it reads it."""

from __future__ import annotations

import sys
from pathlib import Path

from gym_runtime.gym_release import release_for
from gym_runtime.gym_release.startup_imports import startup_imports


def test_the_0_7_line_has_a_list_of_what_its_servers_and_a_ray_head_import() -> None:
    listed = startup_imports(release_for("0.7.0", "test"))
    assert {"ray/__init__.py", "nemo_gym/server_utils.py", "fastapi/applications.py", "openai/__init__.py"} <= set(
        listed
    )
    assert all(p.endswith(".py") and not p.startswith("/") and ".." not in p.split("/") for p in listed)


def test_without_ray_the_list_leaves_out_rays_own_sources_only() -> None:
    release = release_for("0.7.0", "test")
    full, without = startup_imports(release), startup_imports(release, ray=False)
    assert without == tuple(p for p in full if not p.split("/")[0] == "ray") and len(without) < len(full)
    assert "nemo_gym/server_utils.py" in without and "ray/__init__.py" not in without


def test_a_line_without_a_list_seeds_nothing() -> None:
    assert startup_imports(release_for("0.4.0", "test")) == ()
    assert startup_imports(release_for("0.6.0", "test")) == ()


def test_a_list_is_recorded_from_the_sources_a_venv_holds_bytecode_of(tmp_path) -> None:
    from gym_runtime.gym_release.startup_imports import record

    sp = tmp_path / "lib" / "python3.13" / "site-packages"
    for rel, pyc in (("pkg/mod.py", True), ("pkg/plain.py", False), ("top.py", True)):
        (sp / rel).parent.mkdir(parents=True, exist_ok=True)
        (sp / rel).write_text("X = 1\n")
        if pyc:
            cache = (sp / rel).parent / "__pycache__"
            cache.mkdir(exist_ok=True)
            (cache / f"{(sp / rel).stem}.cpython-313.pyc").write_bytes(b"")
    (sp / "pkg" / "__pycache__" / "gone.cpython-313.pyc").write_bytes(b"")  # its source is not there
    (sp / "pkg" / "__pycache__" / "mod.cpython-312.pyc").write_bytes(b"")  # another interpreter's
    (tmp_path / "bin" / "__pycache__").mkdir(parents=True)
    (tmp_path / "bin" / "tool.py").write_text("")
    (tmp_path / "bin" / "__pycache__" / "tool.cpython-313.pyc").write_bytes(b"")  # outside site-packages
    assert record(tmp_path, "cpython-313") == ["pkg/mod.py", "top.py"]
    # what a preloaded parent reads first comes first, in its order (the seed is compiled in it)
    assert record(tmp_path, "cpython-313", first=["top.py", "elsewhere.py"]) == ["top.py", "pkg/mod.py"]


def test_the_import_order_is_the_order_an_import_reads_the_sources_in(tmp_path: Path) -> None:
    # a venv of the running interpreter: a parent's module is read before the modules it imports
    from gym_runtime.gym_release.startup_imports import import_order

    base = Path(sys._base_executable).resolve()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(base)
    (tmp_path / "pyvenv.cfg").write_text(f"home = {base.parent}\ninclude-system-site-packages = false\n")
    sp = tmp_path / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (sp / "pkg").mkdir(parents=True)
    (sp / "top.py").write_text("import pkg\nimport leaf\n")
    (sp / "pkg" / "__init__.py").write_text("from pkg import sub\n")
    (sp / "pkg" / "sub.py").write_text("import leaf\n")
    (sp / "leaf.py").write_text("X = 1\n")
    (sp / "broken.py").write_text("raise RuntimeError('a module that fails is skipped')\n")
    assert import_order(tmp_path, ["broken", "top", "json"]) == [
        "broken.py",
        "top.py",
        "pkg/__init__.py",
        "pkg/sub.py",
        "leaf.py",
    ]


def test_the_0_7_list_starts_with_what_a_preloaded_parent_reads_first() -> None:
    listed = startup_imports(release_for("0.7.0", "test"))
    assert listed[0] == "pydantic/__init__.py"  # the parent's first import (placement/local.py's SHARED_MODULES)
    assert listed.index("nemo_gym/server_utils.py") < listed.index("aiohttp/web.py")  # a server's, after the fork
    assert len(set(listed)) == len(listed) == 4264  # the same sources as recorded, each once
