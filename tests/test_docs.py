"""The documentation stands on its own and agrees with the code.

- every error code the code raises is listed in docs/errors.md, every code listed there is raised
  somewhere, and each code's row names every module that raises it;
- the table of docs/rollouts.md "Failure classes" gives every row error code the HTTP status and
  class ``gym_runtime/rollouts/failure_class.py`` gives it, and lists every rollout code of docs/errors.md;
- docs/architecture.md keeps its numbered sections (code cites them as ``docs/architecture.md §N``)
  and every such citation in the repository names a section that exists;
- every relative link in the README, CONTRIBUTING.md and docs/ resolves to a file (and heading);
- those documents, and every other text file of the repository, name nothing outside the
  repository (machine paths, outside documents, tracker entries).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
ERRORS = ROOT / "docs" / "errors.md"
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = [p for d in ("gym_runtime", "sandbox", "servers") for p in sorted((ROOT / d).rglob("*.py"))]
CODE_RE = re.compile(r"GR-[A-Z0-9]+(?:-[A-Z0-9]+)*")

# The section numbers code cites; each title must keep saying what the section is about.
SECTIONS = {
    1: "who uses it",
    2: "stages",
    3: "environment package",
    4: "configuration",
    5: "venvs",
    6: "sandbox and egress",
    7: "server processes and head server",
    8: "built-in servers",
    9: "dataset rows and rollouts",
    10: "placement",
}


def _codes(paths: list[Path]) -> tuple[set[str], set[str]]:
    """(codes, families): ``GR-A-B`` is a code, ``GR-A-*`` names the family ``GR-A``."""
    codes, families = set(), set()
    for p in paths:
        text = p.read_text()
        for m in CODE_RE.finditer(text):
            (families if text.startswith("-*", m.end()) else codes).add(m.group(0))
    return codes, families


def test_every_error_code_in_the_code_is_documented_and_every_documented_code_exists() -> None:
    in_code, _ = _codes(CODE)
    in_doc, families = _codes([ERRORS])
    assert in_code - in_doc - families == set(), "raised in the code but missing from docs/errors.md"
    assert in_doc - in_code == set(), "listed in docs/errors.md but raised nowhere"
    assert {f for f in families if not any(c.startswith(f + "-") for c in in_code)} == set()


def test_each_error_code_names_the_modules_that_raise_it() -> None:
    """docs/errors.md's "raised in" column links every module of the code that names the code."""
    rows = re.findall(r"^\| `(GR-[A-Z0-9-]+)` \|[^\n]*\| ([^|\n]*) \|$", ERRORS.read_text(), re.M)
    assert rows, "docs/errors.md has no code table"
    wrong = []
    for code, cell in rows:
        pattern = re.compile(re.escape(code) + r"(?![A-Z0-9-])")
        want = {p.relative_to(ROOT).as_posix() for p in CODE if pattern.search(p.read_text())}
        named = set(re.findall(r"\]\(\.\./([^)]+)\)", cell))
        if named != want:
            wrong.append(f"{code}: add {sorted(want - named)}, drop {sorted(named - want)}")
    assert wrong == []


def _failure_table() -> dict[str, tuple[str, str]]:
    """``code -> (status cell, class cell)`` of the first table under docs/rollouts.md "Failure classes"."""
    text = (ROOT / "docs" / "rollouts.md").read_text().split("## Failure classes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(GR-[A-Z0-9-]+)` \| ([^|]+) \| ([^|]+) \|", text, re.M)
    return {code: (status.strip(), cls.strip()) for code, status, cls in rows}


def test_the_failure_classes_table_agrees_with_the_code_and_the_error_table() -> None:
    from gym_runtime.rollouts.failure_class import STATUS, failure_class

    table = _failure_table()
    assert set(table) == set(STATUS)
    for code, (status, cls) in table.items():
        if code == "GR-ROLLOUT-HTTP":  # the agent's own status
            assert status == "the agent's own" and cls == "by that status"
            continue
        assert int(re.match(r"\d+", status).group(0)) == STATUS[code], code
        assert cls.startswith(failure_class(STATUS[code])), code
    rollouts = re.findall(r"^\| `(GR-[A-Z0-9-]+)` \| Rollouts \|", ERRORS.read_text(), re.M)
    assert rollouts and set(rollouts) <= set(STATUS)


def _headings(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return [m.group(2).strip() for m in re.finditer(r"^(#{1,6})\s+(.*)$", text, re.M)]


def test_architecture_sections_keep_their_numbers() -> None:
    numbered = {}
    for h in _headings(ARCHITECTURE):
        m = re.match(r"(\d+)\. (.*)", h)
        if m:
            numbered[int(m.group(1))] = m.group(2).lower()
    assert sorted(numbered) == sorted(SECTIONS)
    for n, topic in SECTIONS.items():
        assert topic in numbered[n], f"§{n} is {numbered[n]!r}, cited as being about {topic!r}"


def test_architecture_citations_name_existing_sections() -> None:
    sections = {m.group(1) for h in _headings(ARCHITECTURE) if (m := re.match(r"(\d+(?:\.\d+)?)\.? ", h))}
    files = [
        p
        for p in ROOT.rglob("*")
        if p.suffix in (".py", ".md") and ".venv" not in p.parts and ".uv-bootstrap" not in p.parts
    ]
    cited = {
        (p.relative_to(ROOT).as_posix(), n)
        for p in files
        for n in re.findall(r"architecture\.md §(\d+(?:\.\d+)?)", p.read_text(errors="replace"))
    }
    assert {(f, n) for f, n in cited if n not in sections} == set()


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(doc: Path) -> None:
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in {_slug(h) for h in _headings(dest)}:
            broken.append(target)
    assert broken == []


OUTSIDE = [
    (re.compile(r"(?<![\w.])/(?:work|root|home|Users)/"), "an absolute path of a machine"),
    (re.compile(r"DESIGN\.md|\.\./shared|\breference/[\w-]+\.md"), "a document outside the repository"),
    (re.compile(r"\bissues? #?\d+", re.I), "a tracker entry"),
]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_docs_name_nothing_outside_the_repository(doc: Path) -> None:
    text = doc.read_text()
    found = [f"{why}: {m.group(0)!r}" for pattern, why in OUTSIDE for m in pattern.finditer(text)]
    assert found == []


# Elsewhere in the tree, home directories are real container paths and case inputs cite upstream
# trackers (``owner/repo issue #N``); what must not appear is this project's own machine, its
# outside documents and its own tracker's entry numbers.
TREE_OUTSIDE = [
    (re.compile(r"(?<![\w.])/work/"), "an absolute path of a machine"),
    OUTSIDE[1],
    (re.compile(r"\bissues? \d+\b", re.I), "a tracker entry"),
]
# Not the repository's own text: environments, caches, build output; this file spells the patterns.
SKIP_DIRS = {".git", ".venv", ".uv-bootstrap", "__pycache__", ".hypothesis", ".pytest_cache", "build", "dist"}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".txt", ".sh", ".cfg", ".ini", ".json", ".jsonl", ""}


def _repository_text() -> list[Path]:
    out = []
    for p in sorted(ROOT.rglob("*")):
        rel = p.relative_to(ROOT)
        if (
            p.is_file()
            and not SKIP_DIRS.intersection(rel.parts)
            and p.suffix in TEXT_SUFFIXES
            and p != Path(__file__).resolve()
            and p.stat().st_size < 2_000_000
        ):
            out.append(p)
    return out


def test_no_file_of_the_repository_names_anything_outside_it() -> None:
    found = []
    for p in _repository_text():
        try:
            text = p.read_text()
        except UnicodeDecodeError:
            continue
        for pattern, why in TREE_OUTSIDE:
            found += [f"{p.relative_to(ROOT)}: {why}: {m.group(0)!r}" for m in pattern.finditer(text)]
    assert found == []
