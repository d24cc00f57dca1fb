"""The NeMo Gym releases this runtime knows, as their wheels on PyPI declare them.

Each row is read off the ``nemo-gym`` wheel's ``METADATA`` of that version: ``Requires-Python``
and the ``openai`` and ``ray[default]`` requirements. The runtime needs them before anything is
downloaded (``validate`` is offline): the default ``openai`` pin of server venvs is the one the
pinned release accepts (case C07: a pin outside it makes every venv unsatisfiable), and an
interpreter below ``Requires-Python`` is refused before a build. A release missing here is still
run, by its line's profile, with the newest known row of that line as its figures
(:func:`known_release`); a vendored wheel's own ``METADATA`` always wins over this table. A
release of a line newer than every line here (:func:`newer_than_known_lines`: 0.8.0) copies no
row: its figures come from its wheel only, and without one they are unknown (:data:`UNREAD`).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import Version


@dataclass(frozen=True)
class KnownRelease:
    """One ``nemo-gym`` release: ``version``, ``requires_python`` (its ``Requires-Python``),
    ``openai`` (its ``openai`` requirement) and ``ray`` (its ``ray[default]`` requirement), all as
    specifier strings (``""``: not known); ``default_openai``: the exact ``openai`` version server
    venvs get when the operator pins none (the newest its requirement admits; None when no single
    version is known, and then the release's own requirement decides at install time);
    ``ray_extra``: the extra of ``nemo-gym`` that brings Ray when Ray is not one of its own
    requirements (NeMo Gym after 0.7.0: ``nemo-gym[ray]``), else None; ``read_from``: where the
    figures were read (``wheels/<file>``), None for a table row or figures not read at all."""

    version: str
    requires_python: str
    openai: str
    ray: str
    default_openai: str | None
    ray_extra: str | None = None
    read_from: str | None = None

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


def newer_than_known_lines(version: str | Version) -> bool:
    """True when ``version``'s release line (major.minor: ``0.8`` of 0.8.0) is newer than the line of
    every release in :data:`RELEASES` (0.7.1 is not: it is of the known line 0.7)."""
    v, newest = Version(str(version)), Version(RELEASES[-1].version)
    return v.release[:2] > newest.release[:2]


def known_release(version: str | Version) -> KnownRelease:
    """The row of ``version``; for a release not in the table, the newest known row at or below it
    (the oldest row for a version below every known one), with ``version`` set to the one asked;
    for a release of a line newer than every known one, figures that are all unknown (the module
    doc: never another release's)."""
    v = Version(str(version))
    if newer_than_known_lines(v):
        return KnownRelease(str(v), "", "", "", None)
    at_or_below = [r for r in RELEASES if Version(r.version) <= v]
    row = at_or_below[-1] if at_or_below else RELEASES[0]
    if Version(row.version) == v:
        return row
    return KnownRelease(str(v), row.requires_python, row.openai, row.ray, row.default_openai)


def is_known(version: str | Version) -> bool:
    """True when ``version`` is a row of :data:`RELEASES`."""
    v = Version(str(version))
    return any(Version(r.version) == v for r in RELEASES)
