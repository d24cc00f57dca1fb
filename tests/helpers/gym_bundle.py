"""Any config of a ``nemo-gym`` wheel as a wheels-v1 environment package, the way an author bundles one.

``bundle_package(wheel, config, root)`` writes a package under ``root`` whose manifest lists the
policy model's config (``responses_api_models/vllm_model/configs/vllm_model.yaml``) and ``config``
(a resources-server config, ``environments/NAME/config.yaml`` or ``benchmarks/NAME/config.yaml``:
a wheels-v1 package may list configs anywhere). It copies, byte for byte, every config that
``config`` reaches through nested ``config_paths`` and every server tree
(``{server_type}/{implementation}/``) those configs name, leaving out what a package may not hold
(``.jsonl`` files, ``data/``, ``tests/``), and vendors the wheel itself in ``wheels/`` (so the
environment runs that wheel's Gym release, and nested entries may also reach the wheel's files).
``reachable(wheel, config)`` is the list of configs it copies.

``gym_wheel_of(version)`` downloads a release's wheel once (pip, ``--no-deps``) into the tests'
cache, like :func:`tests.helpers.gym_package.gym_wheel`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import yaml

from tests.helpers.gym_package import cache_dir

SERVER_TYPES = ("responses_api_models", "responses_api_agents", "resources_servers", "environment_servers")
POLICY = "responses_api_models/vllm_model/configs/vllm_model.yaml"


def gym_wheel_of(version: str) -> Path:
    """The ``nemo_gym-<version>`` wheel from PyPI, downloaded on first use."""
    dest = cache_dir() / "wheels"
    found = sorted(dest.glob(f"nemo_gym-{version}-*.whl"))
    if not found:
        from tests.helpers.gym_parser import parser_python

        python = parser_python(version)  # pip picks only wheels whose Requires-Python it meets
        assert python, f"needs a Python nemo-gym {version} accepts to run pip"
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
                "--dest",
                str(dest),
                f"nemo-gym=={version}",
            ],
            check=True,
            timeout=600,
        )
        found = sorted(dest.glob(f"nemo_gym-{version}-*.whl"))
    return found[0]


def _load(z: zipfile.ZipFile, name: str) -> dict:
    doc = yaml.safe_load(z.read(name)) if name in z.namelist() else None
    return doc if isinstance(doc, dict) else {}


def reachable(wheel: Path, config: str) -> list[str]:
    """``config`` and every config its nested ``config_paths`` reach inside the wheel, breadth first."""
    with zipfile.ZipFile(wheel) as z:
        out, i = [config], 0
        while i < len(out):
            for entry in _load(z, out[i]).get("config_paths") or []:
                if isinstance(entry, str) and entry not in out and entry in z.namelist():
                    out.append(entry)
            i += 1
    return out


def _trees(z: zipfile.ZipFile, configs: list[str]) -> set[str]:
    trees = set()
    for name in configs:
        for value in _load(z, name).values():
            for stype in SERVER_TYPES:
                impls = value.get(stype) if isinstance(value, dict) else None
                trees |= {f"{stype}/{impl}" for impl in (impls if isinstance(impls, dict) else {})}
    return {t for t in trees if any(n.startswith(t + "/") for n in z.namelist())}


def bundle_package(wheel: Path, config: str, root: Path) -> Path:
    """Write the package (module doc) under ``root``; returns ``root``."""
    configs = reachable(wheel, POLICY) + [c for c in reachable(wheel, config) if c != POLICY]
    with zipfile.ZipFile(wheel) as z:
        trees = _trees(z, configs)
        for name in z.namelist():
            rel = Path(name)
            keep = name in configs or any(name.startswith(t + "/") for t in trees)
            inner = rel.parts[2:] if len(rel.parts) > 2 else ()
            if (
                not keep
                or name.endswith(("/", ".jsonl"))
                or (name not in configs and inner[:1] in (("data",), ("tests",)))
            ):
                continue
            out = root / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(name))
    (root / "wheels").mkdir(parents=True, exist_ok=True)
    try:  # the wheel is read-only input: a hard link saves copying 40 MB per package
        os.link(wheel, root / "wheels" / wheel.name)
    except OSError:
        shutil.copyfile(wheel, root / "wheels" / wheel.name)
    manifest = {
        "format": "wheels-v1",
        "config_paths": [POLICY, config],
        "metadata": {"name": config.replace("/", "-").removesuffix(".yaml")[:200]},
    }
    (root / "nemo-environment.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return root
