"""What counts as a server tree reaching Ray (gym_runtime/ray/imports.py), with the modules
the 0.7 release profile lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_runtime.gym_release import release_for
from gym_runtime.ray.imports import MAX_FILE_BYTES, ray_import

MODULES = release_for("0.7.0", "test").ray_modules


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.mark.parametrize(
    ("source", "where"),
    [
        ("import os\nimport ray\n", "app.py:2 imports ray"),
        ("def f():\n    from ray.util import ActorPool\n", "app.py:2 imports ray.util"),
        ("import ray.data as rd\n", "app.py:1 imports ray.data"),
        ("from nemo_gym.server_utils import initialize_ray\n", "app.py:1 imports nemo_gym.server_utils.initialize_ray"),
        (
            "from nemo_gym.orchestration import ray_serve_gateway\n",
            "app.py:1 imports nemo_gym.orchestration.ray_serve_gateway",
        ),
        ("import importlib\nm = importlib.import_module('ray')\n", "app.py:2 imports ray"),
        ("m = __import__('ray.util')\n", "app.py:1 imports ray.util"),
    ],
)
def test_an_import_of_ray_is_found_with_its_file_and_line(tmp_path: Path, source: str, where: str) -> None:
    assert ray_import(tree(tmp_path, {"app.py": source}), MODULES) == (where, None)


def test_a_tree_without_ray_reaches_none(tmp_path: Path) -> None:
    t = tree(
        tmp_path,
        {
            "app.py": "import raydium\nfrom nemo_gym.server_utils import ServerClient\nfrom . import rayish\n"
            "x = 'import ray'\n",
            "rayish.py": "array = 1\n",
            ".venv/lib/site.py": "import ray\n",  # a venv inside the tree is not the tree's code
            "__pycache__/app.py": "import ray\n",
            ".hidden/x.py": "import ray\n",
        },
    )
    assert ray_import(t, MODULES) is None


def test_a_file_in_a_subdirectory_counts(tmp_path: Path) -> None:
    t = tree(tmp_path, {"app.py": "import lib.work\n", "lib/work.py": "\n\nimport ray\n"})
    assert ray_import(t, MODULES) == ("lib/work.py:3 imports ray", None)


def test_what_cannot_be_read_counts_as_ray(tmp_path: Path) -> None:
    broken = tree(tmp_path / "a", {"app.py": "def (:\n"})
    assert ray_import(broken, MODULES) == ("app.py cannot be read (SyntaxError)", broken / "app.py")
    big = tree(tmp_path / "b", {"app.py": "x = 1\n"})
    (big / "app.py").write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    assert ray_import(big, MODULES) == ("app.py is larger than 4 MiB (not read)", None)


@pytest.mark.parametrize(
    ("source", "where"),
    [
        ("import nemo_gym.server_utils as su\nsu.initialize_ray()\n", "app.py:2 calls .initialize_ray"),
        ("from nemo_gym import server_utils\nray = server_utils._get_ray()\n", "app.py:2 calls ._get_ray"),
        ("from nemo_gym.server_utils import *\n", "app.py:1 imports nemo_gym.server_utils.*"),
        ("from importlib import import_module as load\nload(name='ray')\n", "app.py:2 imports ray"),
    ],
)
def test_the_sdks_ray_calls_reached_another_way_count_too(tmp_path: Path, source: str, where: str) -> None:
    assert ray_import(tree(tmp_path, {"app.py": source}), MODULES) == (where, None)


def test_links_and_what_is_no_regular_file_count_as_ray_and_are_never_opened(tmp_path: Path) -> None:
    import os

    outside = tree(tmp_path / "shared", {"work.py": "import ray\n"})
    linked_dir = tree(tmp_path / "a", {"app.py": "x = 1\n"})
    (linked_dir / "common").symlink_to(outside, target_is_directory=True)
    assert ray_import(linked_dir, MODULES) == ("common is a symbolic link (not read)", None)
    linked_file = tree(tmp_path / "b", {"app.py": "x = 1\n"})
    (linked_file / "zero.py").symlink_to("/dev/zero")
    assert ray_import(linked_file, MODULES) == ("zero.py is a symbolic link (not read)", None)
    fifo = tree(tmp_path / "c", {"app.py": "x = 1\n"})
    os.mkfifo(fifo / "pipe.py")  # opening it would wait for a writer forever
    assert ray_import(fifo, MODULES) == ("pipe.py cannot be read (ValueError)", None)


def test_a_file_that_does_not_parse_does_not_hide_a_real_import(tmp_path: Path) -> None:
    t = tree(tmp_path, {"a_util.py": "def (:\n", "app.py": "import ray\n"})
    assert ray_import(t, MODULES) == ("app.py:1 imports ray", None)
