"""Unquoted ``yes`` / ``no`` / ``on`` / ``off`` where text is meant: a warning naming the quoted fix.

PyYAML, and so OmegaConf and NeMo Gym's own config parser, reads YAML 1.1: the plain (unquoted)
words ``yes``, ``no``, ``on``, ``off`` (also ``Yes``, ``YES``, ``Off``...) are booleans
(PyYAML ``resolver.py``, the ``tag:yaml.org,2002:bool`` implicit resolver). Written as answers or
labels (``labels: [yes, no]``) they reach the server as ``True`` / ``False``, and a grader that
compares strings scores every answer 0 without an error. The meaning is kept (Gym reads the same),
but a ``GR-CONFIG-YAML-BOOLEAN`` warning names the file, the key path, the line and the quoted fix
where such a word stands

* in a list whose other items are text (or such words themselves): ``labels: [yes, no]``,
  ``answers: [maybe, no]``;
* in a key that the instance's server config class declares to take text
  (:attr:`~gym_runtime.package.server_class.ConfigClass.texts`: ``str``, ``list[str]``,
  ``Literal["on", "off"]``...), read without running anything;
* in a list of text in a YAML data file of the package that a server's config names
  (:func:`data_file_warnings`: a value ending ``.yaml`` / ``.yml`` that is a file of the package,
  relative to its root or to the server's directory, as a server started in its directory opens
  it): the server reads that file with a YAML 1.1 loader of its own.

What was written is read from the source token: each config file of the package is composed again
with PyYAML's safe loader (:func:`yaml.compose`), whose nodes keep their tag, their style (plain or
quoted) and their marks (line and column). ``true`` / ``false`` in any case are left alone: they
are booleans in YAML 1.2 too, so writing them says a boolean is meant. A value another file or an
override replaced is not reported.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gym_runtime.config.sources import Sources
from gym_runtime.errors import Violation
from gym_runtime.package.server_class import config_class

BOOL_TAG = "tag:yaml.org,2002:bool"
STR_TAG = "tag:yaml.org,2002:str"
_YAML12 = frozenset({"true", "false"})

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Word:
    """One unquoted YAML 1.1 boolean word: its key ``path`` in the file, the ``token`` as written,
    its 1-based ``line``, and for a list item the items of the whole list as the fix writes them
    (``items``, text quoted; ``None`` for a mapping value), the list's boolean words (``bools``) and
    ``texty``: True when every other item is text or such a word."""

    path: Path_
    token: str
    line: int
    items: tuple[str, ...] | None = None
    bools: tuple[str, ...] = ()
    texty: bool = False


def _is_word(node: yaml.Node) -> bool:
    return (
        isinstance(node, yaml.ScalarNode)
        and node.style is None
        and node.tag == BOOL_TAG
        and node.value.lower() not in _YAML12
    )


def _quoted(node: yaml.Node) -> str:
    return (
        f'"{node.value}"'
        if isinstance(node, yaml.ScalarNode) and (_is_word(node) or node.tag == STR_TAG)
        else (node.value if isinstance(node, yaml.ScalarNode) else "...")
    )


def words(text: str) -> list[Word]:
    """Every unquoted YAML 1.1-only boolean word of the YAML document ``text`` (module doc); ``[]``
    when ``text`` is not one composable document (the loader reports that elsewhere)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return []
    return list(_walk(root, ())) if root is not None else []


def _walk(node: yaml.Node, path: Path_) -> Iterator[Word]:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                yield from _walk(value, (*path, key.value))
    elif isinstance(node, yaml.SequenceNode):
        items = node.value
        if any(_is_word(i) for i in items):
            texty = all(isinstance(i, yaml.ScalarNode) and (_is_word(i) or i.tag == STR_TAG) for i in items)
            tokens = tuple(_quoted(i) for i in items)
            bools = tuple(i.value for i in items if _is_word(i))
            for n, item in enumerate(items):
                if _is_word(item):
                    yield Word((*path, n), item.value, item.start_mark.line + 1, tokens, bools, texty)
        for n, item in enumerate(items):
            if not isinstance(item, yaml.ScalarNode):
                yield from _walk(item, (*path, n))
    elif _is_word(node):
        yield Word(path, node.value, node.start_mark.line + 1)


def _dotted(path: Path_) -> str:
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out


def _get(data: Any, path: Path_) -> Any:
    for k in path:
        try:
            data = data[k]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def yaml_boolean_warnings(
    root: Path, files: list[str], data: dict[str, Any], instances: Mapping[str, Any], sources: Sources
) -> list[Violation]:
    """``GR-CONFIG-YAML-BOOLEAN`` warnings (module doc) for the config ``files`` (labels relative to
    the package ``root``; a label that is no file there, such as a vendored wheel's member, is
    skipped), given the resolved ``data``, its server ``instances`` (``ServerInstance`` by name) and
    ``sources``. One warning per list, one per mapping value."""
    out: list[Violation] = []
    classes: dict[str, Any] = {}
    for label in dict.fromkeys(files):
        path = root / label
        try:
            text = path.read_text(encoding="utf-8") if path.is_file() else None
        except (OSError, UnicodeDecodeError):
            text = None
        if text is None:
            continue
        lists_done: set[Path_] = set()
        for w in words(text):
            key = _dotted(w.path)
            if sources.of(key) != label or not isinstance(_get(data, w.path), bool):
                continue  # replaced by a later file or an override, or no longer where it was written
            if w.items is not None and w.texty:
                if w.path[:-1] in lists_done:
                    continue
                lists_done.add(w.path[:-1])
                out.append(_list_warning(label, w))
                continue
            declared = _declared_text(w.path, instances, classes, root)
            if declared:
                out.append(_declared_warning(label, w, declared))
    return out


def _declared_text(path: Path_, instances: Mapping[str, Any], classes: dict[str, Any], root: Path) -> str | None:
    """Where the instance's config class declares the key at ``path`` (``NAME.type.impl.KEY`` or an
    item of that list) to take text, else None."""
    if len(path) < 4 or not isinstance(path[3], str) or any(isinstance(k, str) for k in path[4:]):
        return None
    inst = instances.get(str(path[0]))
    if inst is None or inst.server_dir.origin == "builtin" or (inst.server_type, inst.implementation) != path[1:3]:
        return None
    if inst.name not in classes:
        classes[inst.name] = config_class(Path(inst.server_dir.path), inst.entrypoint, root)
    found = classes[inst.name]
    return found.texts.get(path[3]) if found is not None else None


def _read_as(token: str) -> str:
    return "true" if token.lower() in ("yes", "on") else "false"


def _list_warning(label: str, w: Word) -> Violation:
    key = _dotted(w.path[:-1])
    spelled = ", ".join(f"{t} -> {_read_as(t)}" for t in w.bools)
    return Violation(
        "GR-CONFIG-YAML-BOOLEAN",
        f"line {w.line}: the list holds unquoted YAML 1.1 boolean words ({spelled}): "
        "YAML (and so the server) reads them as true/false, not as the text written",
        file=label,
        key=key,
        hint=f"quote them: {key.rsplit('.', 1)[-1]}: [{', '.join(w.items or ())}]",
    )


def _declared_warning(label: str, w: Word, declared: str) -> Violation:
    key = _dotted(w.path)
    leaf = key.rsplit(".", 1)[-1]
    fix = f'{leaf}: "{w.token}"' if w.items is None else f"{leaf.split('[')[0]}: [{', '.join(w.items)}]"
    return Violation(
        "GR-CONFIG-YAML-BOOLEAN",
        f"line {w.line}: unquoted {w.token} is a YAML 1.1 boolean ({_read_as(w.token)}), "
        f"but {declared} takes text: the server would refuse it or compare against {_read_as(w.token).title()}",
        file=label,
        key=key,
        hint=f"quote it: {fix}",
    )


DATA_SUFFIXES = (".yaml", ".yml")


def _strings(node: Any, path: Path_ = ()) -> Iterator[tuple[Path_, str]]:
    if isinstance(node, Mapping):
        for k, v in node.items():
            yield from _strings(v, (*path, str(k)))
    elif isinstance(node, list):
        for n, v in enumerate(node):
            yield from _strings(v, (*path, n))
    elif isinstance(node, str):
        yield path, node


def _data_file(root: Path, server_dir: Path, value: str) -> str | None:
    """The package-relative label of the YAML data file ``value`` names, or None."""
    if not value.lower().endswith(DATA_SUFFIXES) or "\n" in value:
        return None
    real_root = root.resolve()
    for base in (root, server_dir):
        try:
            f = (base / value).resolve()
        except (OSError, RuntimeError, ValueError):
            continue
        if f.is_relative_to(real_root) and f.is_file():
            return f.relative_to(real_root).as_posix()
    return None


def data_file_warnings(root: Path, instances: Mapping[str, Any], config_files: list[str]) -> list[Violation]:
    """``GR-CONFIG-YAML-BOOLEAN`` warnings for lists of text holding unquoted YAML 1.1 boolean words
    in the YAML data files that the (non built-in) ``instances``' configs name (module doc); the
    package's ``config_files`` themselves are left to :func:`yaml_boolean_warnings`. One warning
    per list, naming the data file, the key path in it and the config key that names the file."""
    out: list[Violation] = []
    done: set[str] = set(config_files)
    for inst in instances.values():
        if inst.server_dir.origin == "builtin":
            continue
        for key, value in _strings(inst.config):
            label = _data_file(root, Path(inst.server_dir.path), value)
            if label is None or label in done:
                continue
            done.add(label)
            try:
                text = (root / label).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            named = f"{inst.name}.{inst.server_type}.{inst.implementation}.{_dotted(key)}"
            lists: set[Path_] = set()
            for w in words(text):
                if w.items is not None and w.texty and w.path[:-1] not in lists:
                    lists.add(w.path[:-1])
                    v = _list_warning(label, w)
                    out.append(
                        Violation(
                            v.code,
                            f"{v.message} (a data file the config names: {named})",
                            file=v.file,
                            key=v.key,
                            hint=v.hint,
                        )
                    )
    return out
