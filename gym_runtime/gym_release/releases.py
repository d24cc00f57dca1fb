"""The NeMo Gym releases this runtime knows, as their wheels on PyPI declare them.

Each row is read off the ``nemo-gym`` wheel's ``METADATA`` of that version: ``Requires-Python``
and the ``openai`` and ``ray[default]`` requirements. The runtime needs them before anything is
downloaded (``validate`` is offline): the default ``openai`` pin of server venvs is the one the
pinned release accepts (case C07: a pin outside it makes every venv unsatisfiable), and an
interpreter below ``Requires-Python`` is refused before a build. A release missing here is still
run, by its line's profile, with the newest known row of that line as its figures
(:func:`known_release`); a vendored wheel's own ``METADATA`` always wins over this table.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import Version


@dataclass(frozen=True)
class KnownRelease:
    """One ``nemo-gym`` release: ``version``, ``requires_python`` (its ``Requires-Python``),
    ``openai`` (its ``openai`` requirement) and ``ray`` (its ``ray[default]`` requirement), all as
    specifier strings; ``default_openai``: the exact ``openai`` version server venvs get when the
    operator pins none (the newest its requirement admits)."""

    version: str
    requires_python: str
    openai: str
    ray: str
    default_openai: str

    @property
    def python_spec(self) -> SpecifierSet:
        return SpecifierSet(self.requires_python)


# Oldest first. Figures from each wheel's METADATA on PyPI.
RELEASES: tuple[KnownRelease, ...] = (
    KnownRelease("0.2.0", ">=3.12", "<=2.7.2", ">=2.55.1", "2.7.2"),
    KnownRelease("0.2.1", ">=3.12", "<=2.7.2", ">=2.55.1", "2.7.2"),
    KnownRelease("0.3.0", ">=3.12", "<=2.7.2", ">=2.55.1", "2.7.2"),
    KnownRelease("0.3.1", ">=3.12", "<=2.7.2", ">=2.55.1", "2.7.2"),
    KnownRelease("0.4.0", ">=3.12", "<=2.7.2", ">=2.55.1", "2.7.2"),
    KnownRelease("0.5.0", ">=3.13.14", "<=2.7.2", ">=2.56.1", "2.7.2"),
    KnownRelease("0.5.1", ">=3.13.14", "<=2.7.2", ">=2.56.1", "2.7.2"),
    KnownRelease("0.6.0", ">=3.13.14", "==2.44.0", ">=2.56.1", "2.44.0"),
    KnownRelease("0.7.0", ">=3.13.14", "==2.44.0", ">=2.58.0", "2.44.0"),
)
# The release training images ship: the runtime's default nemo-gym pin.
CURRENT = "0.7.0"


def known_release(version: str | Version) -> KnownRelease:
    """The row of ``version``; for a release not in the table, the newest known row at or below it
    (the oldest row for a version below every known one), with ``version`` set to the one asked."""
    v = Version(str(version))
    at_or_below = [r for r in RELEASES if Version(r.version) <= v]
    row = at_or_below[-1] if at_or_below else RELEASES[0]
    if Version(row.version) == v:
        return row
    return KnownRelease(str(v), row.requires_python, row.openai, row.ray, row.default_openai)


def is_known(version: str | Version) -> bool:
    """True when ``version`` is a row of :data:`RELEASES`."""
    v = Version(str(version))
    return any(Version(r.version) == v for r in RELEASES)
