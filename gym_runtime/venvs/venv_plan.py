"""The plan of one venv (:class:`VenvPlan`) and its parts: the injected pins, the wheel pool
(docs/architecture.md §5). Made by :mod:`gym_runtime.venvs.plan`, checked by
:mod:`gym_runtime.venvs.preflight` before any install, built by :mod:`gym_runtime.venvs.build`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

from gym_runtime.package.requirements import InstallSource
from gym_runtime.venvs.overrides import Overrides
from gym_runtime.venvs.pythons import Interpreter

# the environment's own code (NMP: agent and resources-server venvs; environment servers front agents)
STAGE2_TYPES = ("responses_api_agents", "resources_servers", "environment_servers")


@dataclass(frozen=True)
class Pin:
    """An injected pin: ``requirement`` (``ray[default]==2.60.0``), canonical ``name``, ``version``,
    where it came from (``origin``) and whether it is only a constraint."""

    requirement: str
    name: str
    version: str
    origin: str
    as_constraint: bool

    @property
    def constraint(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class PoolEntry:
    """A file of the wheel pool by name: path, canonical name, version, and whether it is a wheel."""

    path: Path
    name: str
    version: str

    @property
    def is_wheel(self) -> bool:
        return self.path.name.endswith(".whl")


@dataclass(frozen=True)
class PoolFile(PoolEntry):
    """A file of the wheel pool with its content's ``sha256`` (for digests and hash checks)."""

    sha256: str


@dataclass(frozen=True)
class VenvPlan:
    """Everything one venv is built from. ``instances``: servers sharing it (config order);
    ``path``: where the ready venv lives; ``closure``: stage-2 ``name==version`` pins (empty =
    no stage 2); ``notes``: what the planner changed, for the plan printout; ``overrides``: the
    server's ``overrides.txt`` (:mod:`gym_runtime.venvs.overrides`), applied to the closure proof and
    both stages; ``inputs``: every input the digest covers (:mod:`gym_runtime.venvs.reasons` compares
    them across builds)."""

    digest: str
    path: Path
    instances: tuple[str, ...]
    server_type: str
    server_dir: Path
    source: InstallSource
    rel_file: str
    pins: tuple[Pin, ...]
    pin_mode: str
    python: Interpreter
    python_origin: str
    wheels_dir: Path | None
    pool: tuple[PoolFile, ...]
    closure: tuple[str, ...]
    hash_mode: bool
    sdk_replacement: str
    notes: tuple[str, ...] = ()
    refresh: tuple[str, ...] = ()
    overrides: Overrides | None = None
    inputs: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)  # what the digest covers

    @property
    def name(self) -> str:
        """A readable label: the first server using it."""
        return self.instances[0]

    @property
    def stage2(self) -> bool:
        return bool(self.closure)

    @property
    def rel_overrides(self) -> str | None:
        """``overrides.txt`` as errors name it (beside :attr:`rel_file`), or None."""
        if self.overrides is None:
            return None
        head = self.rel_file.removesuffix(" (built-in)").rsplit("/", 1)
        return (
            (f"{head[0]}/" if len(head) == 2 else "")
            + self.overrides.file.name
            + (" (built-in)" if self.rel_file.endswith(" (built-in)") else "")
        )

    def pool_of(self, name: str) -> list[PoolFile]:
        n = canonicalize_name(name)
        return [f for f in self.pool if f.name == n]

    def pin_of(self, name: str) -> Pin | None:
        n = canonicalize_name(name)
        return next((p for p in self.pins if p.name == n), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "path": str(self.path),
            "servers": list(self.instances),
            "install_file": self.rel_file,
            "overrides_file": self.rel_overrides,
            "python": self.python.version,
            "python_path": str(self.python.path),
            "python_origin": self.python_origin,
            "pin_mode": self.pin_mode,
            "pins": [
                {"requirement": p.requirement, "as_constraint": p.as_constraint, "origin": p.origin} for p in self.pins
            ],
            "wheels_dir": str(self.wheels_dir) if self.wheels_dir else None,
            "wheel_pool": len(self.pool),
            "stage2": self.stage2,
            "hash_mode": self.hash_mode,
            "notes": list(self.notes),
        }


def read_pool_entries(wheels_dir: Path | None) -> tuple[PoolEntry, ...]:
    """Every wheel and sdist in ``wheels_dir`` by file name (other files are ignored); no file is read."""
    if wheels_dir is None or not wheels_dir.is_dir():
        return ()
    out = []
    for p in sorted(wheels_dir.iterdir()):
        try:
            if p.name.endswith(".whl"):
                name, version, _, _ = parse_wheel_filename(p.name)
            elif p.name.endswith((".tar.gz", ".zip")):
                name, version = parse_sdist_filename(p.name)
            else:
                continue
        except ValueError:
            continue
        out.append(PoolEntry(p, str(name), str(version)))
    return tuple(out)
