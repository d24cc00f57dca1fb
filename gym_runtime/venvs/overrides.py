"""A server's ``overrides.txt``: uv overrides for its venv (docs/architecture.md §5).

A Gym tree whose install file is ``requirements.txt`` may ship ``overrides.txt`` beside it; Gym
0.7.0's launcher then installs with ``uv pip install --override overrides.txt -r requirements.txt``
(NeMo Gym 0.7.0 ``nemo_gym/cli/setup_command.py``, ``setup_env_command``). An override replaces
*every* requirement on its distribution, direct or transitive, the injected pins included: that is
how a tree forces ``protobuf==6.33.6`` past a dependency's stale ``protobuf<5.0.0``, or drops a
dependency with a marker that never holds (``agp-client; sys_platform == 'never'``). An override
adds nothing: a name no requirement asks for is not installed (uv's rule).

Gym reads ``overrides.txt`` only beside ``requirements.txt``; beside ``pyproject.toml`` it is ignored,
and so it is here (the plan says so). The file gets the same treatment as an install file: parsed
line by line (:func:`gym_runtime.package.requirements.classify`), hashed into the venv digest, passed
to the closure proof, to stage 1 and to stage 2 (so the vendored closure resolves under the same
overrides that stage 1 applied), and named with its line in errors. Each line must be a requirement:
``name[extras] <specifier> ; <marker>`` or ``name @ URL`` (a URL only where the index is used); option
lines, includes and local paths are refused before any install (``GR-BUILD-OVERRIDE``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from gym_runtime.errors import BuildError, Violation
from gym_runtime.package.requirements import InstallSource, ReqLine, classify, logical_lines

FILE_NAME = "overrides.txt"
_ALLOWED = ("requirement", "url", "vcs")


@dataclass(frozen=True)
class Overrides:
    """A parsed ``overrides.txt``: ``file``, its logical ``lines`` (1-based line numbers) and the
    number of physical lines ``n_lines`` (so :meth:`render` keeps line N at line N)."""

    file: Path
    lines: tuple[ReqLine, ...]
    n_lines: int

    @property
    def requirements(self) -> list[str]:
        """The override lines as uv is given them (what the venv digest covers)."""
        return [ln.text for ln in self.lines]

    def line_of(self, name: str) -> ReqLine | None:
        """The line overriding distribution ``name`` (canonicalised), if any."""
        n = canonicalize_name(name)
        return next((ln for ln in self.lines if ln.name == n), None)

    def where(self, line: ReqLine) -> str:
        return f"{FILE_NAME} line {line.lineno}"

    def render(self) -> str:
        """The text uv reads (comments dropped, same line numbers)."""
        out = [""] * self.n_lines
        for ln in self.lines:
            out[ln.lineno - 1] = ln.text
        return "\n".join(out) + "\n"

    def removed(self, python_version: str) -> set[str]:
        """Distributions an override takes out of the resolution for a CPython ``python_version``
        on this host (a marker that does not hold, e.g. ``sys_platform == 'never'``)."""
        env: dict[str, Any] = {
            **default_environment(),
            "python_version": ".".join(python_version.split(".")[:2]),
            "python_full_version": python_version,
        }
        out: set[str] = set()
        for ln in self.lines:
            try:
                req = Requirement(ln.text)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate(env):
                out.add(canonicalize_name(req.name))
        return out


def overrides_path(install_file: Path) -> Path:
    return install_file.parent / FILE_NAME


def read_overrides(source: InstallSource, *, server: str) -> Overrides | None:
    """The ``overrides.txt`` that applies to ``source`` (``None``: there is none, or ``source`` is a
    ``pyproject.toml``, beside which Gym ignores it). Raises :class:`BuildError`
    (``GR-BUILD-OVERRIDE``) for a file that cannot be read as UTF-8."""
    path = overrides_path(source.file)
    if source.kind != "requirements" or not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BuildError(
            f"{server}: cannot read {path}",
            cause=str(e),
            code="GR-BUILD-OVERRIDE",
            hint=f"make {FILE_NAME} a UTF-8 text file of requirement lines",
        ) from None
    lines = tuple(classify(n, t) for n, t in logical_lines(text))
    return Overrides(path, lines, max(len(text.splitlines()), 1))


def ignored_note(source: InstallSource, rel_file: str) -> str | None:
    """The plan note for an ``overrides.txt`` beside a ``pyproject.toml`` (``None``: no such file)."""
    if source.kind == "requirements" or not overrides_path(source.file).is_file():
        return None
    rel = rel_file.rsplit("/", 1)[0] + "/" + FILE_NAME if "/" in rel_file else FILE_NAME
    return (
        f"{rel} is not applied: overrides are read beside requirements.txt only (as Gym's launcher "
        "does); to apply them, list the server's dependencies in requirements.txt instead of pyproject.toml"
    )


def override_checks(ov: Overrides, rel_file: str, *, offline: bool) -> list[Violation]:
    """What is wrong with ``ov``'s lines before anything is installed; ``rel_file`` names the file,
    ``offline``: the venv installs its closure offline (a URL override would need the network)."""
    out: list[Violation] = []
    for ln in ov.lines:
        if ln.error:
            why = f"is not a valid requirement: {ln.error}"
        elif ln.kind not in _ALLOWED:
            why = {"option": "is an option line", "include": "includes another file"}.get(
                ln.kind, "is a local path, which an override cannot be"
            )
        elif ln.name is None:
            why = "names no distribution"
        else:
            if offline and ln.kind != "requirement":
                out.append(
                    Violation(
                        "GR-BUILD-NEEDS-NETWORK",
                        f"override `{ln.text}` needs network ({ln.kind}), "
                        "but this package installs offline from wheels/",
                        file=rel_file,
                        key=f"line {ln.lineno}",
                        hint=f"override {ln.name} by version (`{ln.name}==X`) and vendor that wheel into wheels/",
                    )
                )
            continue
        out.append(
            Violation(
                "GR-BUILD-OVERRIDE",
                f"`{ln.text}` {why}; every line of {FILE_NAME} must be a requirement that overrides one distribution",
                file=rel_file,
                key=f"line {ln.lineno}",
                hint="write `name==version`, `name>=low,<high`, `name; <marker>` (a marker that "
                "never holds drops the distribution) or `name @ URL`",
            )
        )
    return out
