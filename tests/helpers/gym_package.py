"""Real NeMo Gym environments as native-v1 packages: server trees from the ``nemo-gym`` wheel on
PyPI (0.4.0 unless a release is given), unchanged.

``gym_wheel()`` downloads the wheel once (pip, ``--no-deps``, whatever the running Python: the
wheel is pure Python and only its files are read) into ``$XDG_CACHE_HOME/gym-runtime-tests/wheels``
and reuses it afterwards. ``assemble_gym_package`` copies ``resources_servers/example_single_tool_call``,
``responses_api_agents/simple_agent``, ``responses_api_models/vllm_model`` and every other tree
the example's main config names (from 0.7.0: ``environment_servers/legacy_agent``, the relay in
front of the agent) out of it byte for byte, leaving out only what a package may not hold
(``.jsonl`` datasets, docs/architecture.md §3) and the trees' ``tests/``; the rows of
``data/example.jsonl`` are returned for the caller to send. The manifest lists Gym's own config
files, policy model first; the agent's config is the example's ``example_single_tool_call_simple_agent``.

``assemble_tree_package`` does the same for any resources server of the wheel: the tree with one of
its configs, every other tree that config names (agents, environment servers from 0.5 on, a
judge's model server), and ``responses_api_models/vllm_model``; every ``datasets`` block is dropped from the
configs (their files are not shipped), and the tree's own example rows are returned.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import zipfile
from collections.abc import Sequence
from pathlib import Path

import yaml

GYM_VERSION = "0.4.0"
TREES = (
    "responses_api_models/vllm_model",
    "resources_servers/example_single_tool_call",
    "responses_api_agents/simple_agent",
)
CONFIGS = (
    "responses_api_models/vllm_model/configs/vllm_model.yaml",
    "resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml",
)
DATASET = "resources_servers/example_single_tool_call/data/example.jsonl"


def release_python(version: str = GYM_VERSION) -> str | None:
    """An interpreter nemo-gym ``version`` runs on, or None: a pyenv Python 3.12+ for a release that
    accepts one (0.4.0: :func:`python_312_plus`), else the one ``tests/helpers/gym_python.py`` finds
    on the host or provisions for the release's ``Requires-Python`` (0.5 and later: >= 3.13.14)."""
    from gym_runtime.gym_release import known_release
    from tests.helpers.gym_python import find_gym_python

    spec = known_release(version).python_spec
    if spec.contains("3.12.0"):
        return python_312_plus()
    found = find_gym_python(str(spec))
    return str(found) if found else None


def python_312_plus() -> str | None:
    """A CPython 3.12 or 3.13 interpreter from pyenv (nemo-gym 0.4.0 needs >= 3.12), or None."""
    pyenv = shutil.which("pyenv")
    root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip() if pyenv else ""
    found = sorted(glob.glob(f"{root}/versions/3.1[23].*/bin/python3")) if root else []
    return found[0] if found else None


def cache_dir() -> Path:
    """Where downloaded test inputs are kept between runs."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gym-runtime-tests"


def gym_wheel(python: str, version: str = GYM_VERSION) -> Path:
    """The ``nemo_gym-<version>`` wheel (default 0.4.0), downloaded with ``python -m pip download`` on
    first use (for the newest Python any release requires, so any ``python`` can fetch any release)."""
    dest = cache_dir() / "wheels"
    found = sorted(dest.glob(f"nemo_gym-{version}-*.whl"))
    if not found:
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                python,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.13.14",
                "--dest",
                str(dest),
                f"nemo-gym=={version}",
            ],
            check=True,
            timeout=600,
        )
        found = sorted(dest.glob(f"nemo_gym-{version}-*.whl"))
    return found[0]


def wheel_version(wheel: Path) -> str:
    """The release a ``nemo_gym-X.Y.Z-...whl`` file holds."""
    return wheel.name.split("-")[1]


def _named_trees(z: zipfile.ZipFile) -> tuple[str, ...]:
    """:data:`TREES` and every other ``{server_type}/{implementation}`` the main config names."""
    doc = yaml.safe_load(z.read(CONFIGS[1])) or {}
    named = {
        f"{t}/{impl}"
        for inst in doc.values()
        if isinstance(inst, dict)
        for t, impls in inst.items()
        if isinstance(impls, dict)
        for impl in impls
    }
    return TREES + tuple(sorted(named - set(TREES)))


def assemble_gym_package(wheel: Path, root: Path) -> tuple[Path, list[dict]]:
    """Write the package under ``root``; returns ``(root, dataset rows)``."""
    with zipfile.ZipFile(wheel) as z:
        trees = tuple(f"{t}/" for t in _named_trees(z))
        version = wheel_version(wheel)
        for name in z.namelist():
            if not name.startswith(trees) or name.endswith("/"):
                continue
            rel = Path(name)
            if name.endswith(".jsonl") or "tests" in rel.parts:
                continue
            out = root / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(name))
        rows = [json.loads(line) for line in z.read(DATASET).decode().splitlines() if line.strip()]
    manifest = {
        "format": "native-v1",
        "config_paths": list(CONFIGS),
        "metadata": {
            "name": "gym-example-single-tool-call",
            "description": f"NeMo Gym {version} example_single_tool_call, unchanged",
        },
    }
    (root / "nemo-environment.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return root, rows


def gym_venv(version: str = GYM_VERSION) -> Path | None:
    """A venv holding ``nemo-gym==<version>`` (its clients ``ng_status``, ``ng_collect_rollouts``,
    ``gym`` and its server trees), built once with real uv from PyPI on an interpreter the release
    accepts (:func:`release_python`) and kept under :func:`cache_dir` between runs (a completion
    marker, written last, says it is whole; a file lock keeps parallel test runs from building it
    twice). None when no such Python exists."""
    import uv
    from filelock import FileLock

    python = release_python(version)
    if python is None:
        return None
    venv = cache_dir() / f"nemo-gym-{version}-venv"
    marker = venv / ".complete"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(venv) + ".lock", timeout=1800):
        if not marker.is_file():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([uv.find_uv_bin(), "venv", "--quiet", "--python", python, str(venv)], check=True)
            subprocess.run(
                [
                    uv.find_uv_bin(),
                    "pip",
                    "install",
                    "--quiet",
                    "--python",
                    str(venv / "bin" / "python"),
                    f"nemo-gym=={version}",
                ],
                check=True,
                timeout=1800,
            )
            marker.write_text(version)
    return venv


def run_gym_cli(gym_bin: Path, head: str, cwd: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the Gym CLI ``argv`` (``argv[0]`` a script in ``gym_bin``, e.g. ``ng_collect_rollouts``)
    pointed at the head server ``head`` (``http://HOST:PORT``) with ``+head_server.host/port``, in
    ``cwd`` (its Hydra output directory and ``HOME`` land there), output captured as text. Raises
    ``subprocess.TimeoutExpired`` after ``timeout`` s."""
    from urllib.parse import urlsplit

    where = urlsplit(head)
    return subprocess.run(
        [str(gym_bin / argv[0]), *argv[1:], f"+head_server.host={where.hostname}", f"+head_server.port={where.port}"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": f"{gym_bin}:/usr/bin:/bin", "HOME": str(cwd), "NO_PROXY": "127.0.0.1"},
    )


def _strip_datasets(node: object) -> None:
    if isinstance(node, dict):
        node.pop("datasets", None)
        for value in node.values():
            _strip_datasets(value)


NAMED_TYPES = ("responses_api_agents", "environment_servers")  # trees whose own configs come along
SERVER_TYPES = ("resources_servers", "responses_api_agents", "responses_api_models", "environment_servers")


def tree_implementations(wheel: Path, tree: str, config: str, leave_out: Sequence[str] = ()) -> list[str]:
    """Every other tree (``type/implementation``) that ``resources_servers/{tree}/configs/{config}``
    configures: its agents and environment servers, and any further resources or model server
    (a judge's ``openai_model``); the server instances named in ``leave_out`` do not count."""
    with zipfile.ZipFile(wheel) as z:
        doc = yaml.safe_load(z.read(f"resources_servers/{tree}/configs/{config}")) or {}
    named = {
        f"{kind}/{impl}"
        for name, inst in doc.items()
        if isinstance(inst, dict) and name not in leave_out
        for kind in SERVER_TYPES
        for impl in (inst.get(kind) or {})
    }
    return sorted(named - {f"resources_servers/{tree}", "responses_api_models/vllm_model"})


def assemble_tree_package(
    wheel: Path, tree: str, config: str, root: Path, leave_out: Sequence[str] = ()
) -> tuple[Path, list[dict]]:
    """Resources server ``tree`` of the wheel as a package under ``root`` (see the module doc):
    files byte for byte except the configs (``datasets`` removed; the top-level server instances
    named in ``leave_out`` removed from ``config``, and their trees left out unless another instance
    uses them) and what a package may not hold (``.jsonl`` files, ``data/``, ``tests/``). Returns
    ``(root, example rows)``; rows are ``[]`` when the tree ships no ``data/example.jsonl``."""
    trees = [
        f"resources_servers/{tree}",
        *tree_implementations(wheel, tree, config, leave_out),
        "responses_api_models/vllm_model",
    ]
    version = wheel_version(wheel)
    keep_configs = {
        f"resources_servers/{tree}/configs/{config}",
        "responses_api_models/vllm_model/configs/vllm_model.yaml",
    }
    configs: list[str] = []
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            top = next((t for t in trees if name.startswith(t + "/")), None)
            rel = Path(name)
            if top is None or name.endswith(("/", ".jsonl")):
                continue
            inner = rel.relative_to(top).parts
            if inner[0] in ("data", "tests"):
                continue
            if inner[0] == "configs" and not top.startswith(NAMED_TYPES):
                if name not in keep_configs:
                    continue
                configs.append(name)
            out = root / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            data = z.read(name)
            if inner[0] == "configs" and name.endswith((".yaml", ".yml")):
                doc = yaml.safe_load(data)
                _strip_datasets(doc)
                for instance in leave_out if isinstance(doc, dict) else ():
                    doc.pop(instance, None)
                data = yaml.safe_dump(doc, sort_keys=False).encode()
            out.write_bytes(data)
        example = f"resources_servers/{tree}/data/example.jsonl"
        rows = (
            [json.loads(line) for line in z.read(example).decode().splitlines() if line.strip()]
            if example in z.namelist()
            else []
        )
    order = sorted(configs, key=lambda c: not c.startswith("responses_api_models/"))  # policy model first
    manifest = {
        "format": "native-v1",
        "config_paths": order,
        "metadata": {
            "name": f"gym-{tree}".replace("_", "-")[:60],
            "description": f"NeMo Gym {version} {tree}, unchanged"
            + (f", without {', '.join(leave_out)}" if leave_out else ""),
        },
    }
    (root / "nemo-environment.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return root, rows
