"""Imports of the Gym SDK that the pinned release lacks, found statically (before any build).

Every ``.py`` file of each server tree the package ships is read (files that never mention
``nemo_gym`` are skipped unparsed) and each ``import nemo_gym.x`` / ``from nemo_gym.x import name``
is checked against the index of the release the environment runs (:mod:`.sdk_index`: the
vendored ``nemo_gym`` wheel, else the committed index of the release). An import inside a ``try``
whose handler catches ``ImportError`` (or a broader exception) is the tree's own fallback and is
not checked; a star import checks only that the module exists. A release with no index skips the
scan with a note.

One error, ``GR-SDK-IMPORT`` (:class:`SdkImportError`, exit 1), lists every ``file:line`` with the
missing module or name, the release in force, the known releases that have it, and the fix (pin
the release the trees were written for, ``GYM_RUNTIME_PIN_NEMO_GYM=X``). Source of the contract:
a Gym server imports the SDK of its venv (NeMo Gym 0.4.0 and 0.7.0 ``nemo_gym/cli/env.py``: the
venv gets one ``nemo-gym``), so an import the release lacks fails at the server's first line.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gym_runtime.errors import UserError, Violation
from gym_runtime.gym_release.sdk_index import SDK, index_for, known_indexes

if TYPE_CHECKING:
    from gym_runtime.gym_release.base import GymRelease
    from gym_runtime.package import Package

MAX_FILE_BYTES = 4 << 20  # a larger .py file is not read (untrusted input)
_SKIP_DIRS = {".git", ".venv", "__pycache__", ".gym-runtime", "node_modules"}
_CATCHES_IMPORT = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


class SdkImportError(UserError):
    """Server trees import SDK modules or names the release in force lacks (exit 1)."""

    code = "GR-SDK-IMPORT"


@dataclass(frozen=True)
class SdkImport:
    """One import of the SDK: ``file`` (relative to the package root), ``line``, ``module``
    (``nemo_gym.server_utils``) and ``name`` (``None`` for ``import module`` / a star import)."""

    file: str
    line: int
    module: str
    name: str | None

    @property
    def what(self) -> str:
        return f"{self.module}.{self.name}" if self.name else self.module


def _catches_import(node: ast.Try) -> bool:
    """True when one of the ``try``'s handlers catches ImportError (or broader)."""
    for h in node.handlers:
        if h.type is None:
            return True
        for t in h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]:
            if (t.id if isinstance(t, ast.Name) else getattr(t, "attr", "")) in _CATCHES_IMPORT:
                return True
    return False


def _statements(body: list[ast.stmt], guarded: bool = False):
    """``(statement, guarded)`` for every statement, nested bodies included (imports are
    statements, so expressions are never walked); ``guarded``: inside a ``try`` body that catches
    ImportError."""
    for node in body:
        yield node, guarded
        inner = guarded or (isinstance(node, ast.Try) and _catches_import(node))
        for part in ("body", "orelse", "finalbody"):
            sub = getattr(node, part, None)
            if isinstance(sub, list):
                yield from _statements(sub, inner if part == "body" else guarded)
        for h in getattr(node, "handlers", []):
            yield from _statements(h.body, guarded)
        for case in getattr(node, "cases", []):
            yield from _statements(case.body, guarded)


def file_imports(text: str, rel: str) -> list[SdkImport]:
    """The unguarded SDK imports of one file's source (``[]`` when it does not parse)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    out: list[SdkImport] = []
    for node, guarded in _statements(tree.body):
        if guarded:
            continue
        if isinstance(node, ast.Import):
            out += [
                SdkImport(rel, node.lineno, a.name, None)
                for a in node.names
                if a.name == SDK or a.name.startswith(SDK + ".")
            ]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and (node.module == SDK or node.module.startswith(SDK + "."))
        ):
            out += [SdkImport(rel, node.lineno, node.module, None if a.name == "*" else a.name) for a in node.names]
    return sorted(out, key=lambda i: i.line)


def tree_files(root: Path) -> list[Path]:
    """The ``.py`` files under a server tree, sorted; symlinked directories are not followed."""
    found: list[Path] = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in _SKIP_DIRS)
        found += [Path(d) / f for f in sorted(files) if f.endswith(".py")]
    return found


def package_imports(package: Package) -> list[SdkImport]:
    """Every unguarded SDK import of the package's own server trees, in file and line order."""
    out: list[SdkImport] = []
    for _, sdir in sorted(package.server_dirs.items()):
        for f in tree_files(sdir.path):
            try:
                if f.is_symlink() or f.stat().st_size > MAX_FILE_BYTES:
                    continue
                data = f.read_bytes()
            except OSError:
                continue
            if SDK.encode() in data:
                out += file_imports(data.decode("utf-8", "replace"), package.rel(f))
    return out


def missing_imports(imports: list[SdkImport], index) -> list[SdkImport]:
    """The imports ``index`` (an :class:`~.sdk_index.SdkIndex` or ``WheelIndex``) cannot satisfy."""
    return [
        i for i in imports if not (index.has_module(i.module) and (i.name is None or index.has_name(i.module, i.name)))
    ]


def _having(i: SdkImport) -> list[str]:
    """The known releases whose SDK has what ``i`` imports."""
    return [
        str(x.version)
        for x in known_indexes()
        if x.has_module(i.module) and (i.name is None or x.has_name(i.module, i.name))
    ]


def check_imports(package: Package, release: GymRelease) -> tuple[list[Violation], str, bool]:
    """``(violations, source, checked)``: one ``GR-SDK-IMPORT`` violation per import ``release``
    lacks (file, ``line N``, what is missing, the releases that have it, the fix); ``source``: the
    index checked against, or why there is none; ``checked``: False when the scan was skipped."""
    imports = package_imports(package)
    if not imports:  # nothing imports the SDK: no index to load
        return [], "no server tree imports the Gym SDK", True
    index, source = index_for(release, package)
    if index is None:
        return [], source, False
    out = []
    for i in missing_imports(imports, index):
        having = _having(i)
        if not index.has_module(i.module):
            what = (
                f"imports {i.module}"
                + (f" ({i.name})" if i.name else "")
                + f": nemo-gym {release.version} has no module {i.module}"
            )
        else:
            what = f"imports {i.name} from {i.module}, which nemo-gym {release.version} does not define"
        has = (
            f"nemo-gym {', '.join(having)} {'has' if len(having) == 1 else 'have'} it"
            if having
            else "no release the runtime knows has it"
        )
        fix = (
            f"run the release the tree was written for (GYM_RUNTIME_PIN_NEMO_GYM={having[-1]})"
            if having
            else "fix the import"
        )
        out.append(
            Violation(
                "GR-SDK-IMPORT",
                f"{what}; {has}",
                file=i.file,
                key=f"line {i.line}",
                hint=f"{fix}, or change the import to what nemo-gym {release.version} offers",
            )
        )
    return out, source, True


def skipped_note(source: str) -> str:
    return f"the server trees' imports of the Gym SDK were not checked: {source}"


def raise_on_missing(package: Package, release: GymRelease) -> str | None:
    """Raise :class:`SdkImportError` listing every import ``release`` lacks; returns a note when
    the scan was skipped (no index of the release), else None."""
    violations, source, checked = check_imports(package, release)
    if violations:
        n = len(violations)
        raise SdkImportError(
            f"{n} import{'s' if n > 1 else ''} of the Gym SDK in the package's server trees "
            f"{'are' if n > 1 else 'is'} missing from nemo-gym {release.version} ({release.source}; checked against "
            f"{source})",
            violations=violations,
            hint="run the Gym release the trees were written for (GYM_RUNTIME_PIN_NEMO_GYM=X; a wheels-v1 "
            "package vendors it as wheels/nemo_gym-X-*.whl), or change the trees' imports",
        )
    return None if checked else skipped_note(source)
