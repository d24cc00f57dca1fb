"""Turn a failure case folder (``tests/cases/data/CNN``) into a real environment package.

The cases' ``nemo-environment.yaml`` files are sketches (``tests/cases/data/README.md``, "Conventions"):
``name`` stands for ``metadata.name`` and ``format`` is left out. A case with a
``wheels_listing.txt`` becomes ``wheels-v1`` (configs stay where they are, each listed wheel is
written as a tiny real wheel); any other case becomes ``native-v1`` with each config file moved
to ``{server_type}/{implementation}/configs/`` of the first server instance it defines. Blocks
``options``, ``sandbox`` and ``ray`` are runtime settings, returned in ``CasePackage.runtime``.
Every implementation a config names gets a server tree (``app.py`` + ``requirements.txt``) in
the package unless the case ships its own, so the package needs no built-in ``servers/``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.helpers.packages import write_server, write_wheel

# The real-world failure cases: each folder holds its inputs and a README with the behaviour owed.
CASES = Path(__file__).resolve().parents[1] / "cases" / "data"
SERVER_TYPES = ("responses_api_models", "responses_api_agents", "resources_servers")
RUNTIME_BLOCKS = ("options", "sandbox", "ray")


@dataclass
class CasePackage:
    """A package built from a case: ``root``, the ``runtime`` blocks of the sketch, and where each
    case config file went (``moved``: case-relative path -> package-relative path)."""

    root: Path
    format: str
    runtime: dict = field(default_factory=dict)
    moved: dict[str, str] = field(default_factory=dict)


def case_dir(case: str, variant: str | None = None) -> Path:
    d = CASES / case
    return d / variant if variant else d


def _instances(data: object) -> list[tuple[str, str, str]]:
    out = []
    if isinstance(data, dict):
        for name, value in data.items():
            if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in SERVER_TYPES:
                st = next(iter(value))
                if isinstance(value[st], dict):
                    out += [(str(name), st, str(impl)) for impl in value[st]]
    return out


def case_package(case: str, dest: Path, variant: str | None = None, fmt: str | None = None) -> CasePackage:
    """Build the package for ``case`` (optionally ``variant``, a sub-folder) under ``dest``."""
    src = case_dir(case, variant)
    sketch = yaml.safe_load((src / "nemo-environment.yaml").read_text()) or {}
    listing = src / "wheels_listing.txt"
    fmt = fmt or ("wheels-v1" if listing.is_file() else "native-v1")
    dest.mkdir(parents=True, exist_ok=True)
    for st in SERVER_TYPES:  # server trees the case ships (app.py fixtures)
        if (src / st).is_dir():
            shutil.copytree(src / st, dest / st, dirs_exist_ok=True)
    moved: dict[str, str] = {}
    impls: set[tuple[str, str]] = set()
    for rel in sketch.get("config_paths", []):
        text = (src / rel).read_bytes()
        found = _instances(yaml.safe_load(text))
        impls |= {(st, impl) for _, st, impl in found}
        target = rel
        if fmt == "native-v1":
            st, impl = (found[0][1], found[0][2]) if found else ("responses_api_agents", "configs_only")
            target = f"{st}/{impl}/configs/{Path(rel).name}"
        (dest / target).parent.mkdir(parents=True, exist_ok=True)
        (dest / target).write_bytes(text)
        moved[rel] = target
    for st, impl in sorted(impls):
        d = dest / st / impl
        if not ((d / "requirements.txt").exists() or (d / "pyproject.toml").exists()):
            write_server(dest, st, impl)
    if fmt != "native-v1":
        for line in listing.read_text().splitlines() if listing.is_file() else []:
            fname = line.split()[0] if line.strip() and not line.startswith("#") else ""
            if fname.endswith(".whl"):
                write_wheel(dest / "wheels", fname)
    manifest = {
        "format": fmt,
        "config_paths": [moved[r] for r in sketch.get("config_paths", [])],
        "metadata": {"name": sketch.get("name", case.lower())},
    }
    (dest / "nemo-environment.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    runtime = {k: sketch[k] for k in RUNTIME_BLOCKS if k in sketch}
    return CasePackage(dest, fmt, runtime, moved)
