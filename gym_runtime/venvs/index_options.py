"""Index options inside a server's ``requirements.txt`` and uv's first-index rule.

A requirements file written for pip may carry ``--extra-index-url URL`` (``--index-url`` / ``-i``,
``--find-links`` / ``-f``, ``--no-index``), e.g. the PyTorch CPU index. uv reads these lines too, so
stage 1 then asks that host as well. But uv, to resist dependency confusion, takes a package's
versions only from the *first* index that has the package (uv's documentation, "Package indexes",
index strategy ``first-index``), where pip takes the best match across all indexes: an index that
also hosts old copies of common packages (jinja2, filelock) makes ``jinja2>=3.1.5`` unsatisfiable
under uv although pip installs it. uv's own switch, ``--index-strategy unsafe-best-match``, cannot be
written in a requirements file (uv refuses the line); the operator sets it as
``UV_INDEX_STRATEGY=unsafe-best-match`` (honoured, :mod:`gym_runtime.venvs.uvrun`).

:func:`index_option_notes` are ``validate``'s warnings (``GR-BUILD-INDEX-OPTION``), one per such line;
:func:`first_index_hint` is the hint of a stage-1 failure whose uv output shows the rule at work
("was found on URL, but not at the requested version"), naming the requirements line that added
the index. The lines are read by :mod:`gym_runtime.package.requirements` (kind ``option``).
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING

from gym_runtime.errors import BuildError, Violation
from gym_runtime.package.requirements import InstallSource, ReqLine, read_install_source
from gym_runtime.venvs.uvrun import redact_url

if TYPE_CHECKING:
    from gym_runtime.package import Package

INDEX_FLAGS = {
    "-i": "--index-url",
    "--index-url": "--index-url",
    "--extra-index-url": "--extra-index-url",
    "-f": "--find-links",
    "--find-links": "--find-links",
    "--no-index": "--no-index",
}
# uv's words when the first index holding a package lacks the version asked for (uv 0.13 resolver hint)
_FIRST_INDEX = re.compile(r"`?([A-Za-z0-9][A-Za-z0-9._-]*)`? was found on (\S+?),? but not at the requested version")


def _flag_and_value(ln: ReqLine) -> tuple[str, str] | None:
    try:
        words = shlex.split(ln.text)
    except ValueError:
        words = ln.text.split()
    if not words:
        return None
    flag, _, inline = words[0].partition("=")
    if flag not in INDEX_FLAGS:
        return None
    value = inline or (words[1] if len(words) > 1 else "")
    return INDEX_FLAGS[flag], value


def index_option_lines(source: InstallSource) -> list[tuple[ReqLine, str, str]]:
    """``(line, option, value)`` for each index option line of ``source`` (option spelled long)."""
    out = []
    for ln in source.lines:
        if ln.kind == "option" and (found := _flag_and_value(ln)):
            out.append((ln, *found))
    return out


def _shown(ln: ReqLine) -> str:
    return redact_url(ln.text)


def index_option_notes(source: InstallSource, rel_file: str) -> list[Violation]:
    """One ``GR-BUILD-INDEX-OPTION`` warning per index option line of ``source`` (``rel_file``: the
    file's name in the package, for the message)."""
    out = []
    for ln, option, _ in index_option_lines(source):
        what = (
            "stage 1 installs from this index only"
            if option == "--index-url"
            else "stage 1 installs from no index"
            if option == "--no-index"
            else "stage 1 also asks this index (another host than the operator's index)"
        )
        out.append(
            Violation(
                "GR-BUILD-INDEX-OPTION",
                f"`{_shown(ln)}`: {what}; under uv a package's versions come only from the "
                "first index that has it (pip takes the best match across indexes), so an index that also hosts old "
                "copies of common packages can make a requirement unsatisfiable",
                file=rel_file,
                key=f"line {ln.lineno}",
                hint="pin what you need from that index (e.g. torch==2.5.1+cpu) and check the build with `gym-runtime "
                "build`; where uv then finds a package only at an old version there, the operator can set "
                "UV_INDEX_STRATEGY=unsafe-best-match (uv's --index-strategy; a requirements file cannot carry it)",
            )
        )
    return out


def first_index_hint(source: InstallSource, rel_file: str, block: str) -> str | None:
    """The hint of a failed resolution whose uv output ``block`` shows uv's first-index rule, naming
    the requirements lines that added the index; None when the output does not show the rule."""
    m = _FIRST_INDEX.search(block)
    if not m:
        return None
    project, index = m.group(1), redact_url(m.group(2).rstrip(",."))
    lines = [
        f"line {ln.lineno} `{_shown(ln)}`" for ln, option, value in index_option_lines(source) if option != "--no-index"
    ]
    added = f" ({rel_file} {', '.join(lines)} adds it)" if lines else ""
    return (
        f"{project} was found first on {index}{added}, which lacks the version asked for, and uv takes a "
        "package's versions only from the first index that has it (uv's first-index rule; pip takes the best "
        f"match across indexes): pin {project} to a version that index has, drop the index line if nothing "
        "needs it, or have the operator set UV_INDEX_STRATEGY=unsafe-best-match (uv's --index-strategy; it "
        "cannot be written in a requirements file, and changes every venv's resolution)"
    )


def package_index_notes(package: Package) -> list[Violation]:
    """:func:`index_option_notes` for every server tree of ``package`` (``validate``); an install file
    that cannot be read is reported by :func:`~gym_runtime.venvs.preflight.package_checks`."""
    out: list[Violation] = []
    for (stype, impl), sdir in sorted(package.server_dirs.items()):
        try:
            source = read_install_source(sdir.install_file, server=f"{stype}/{impl}")
        except BuildError:
            continue
        out += index_option_notes(source, package.rel(sdir.install_file))
    return out
