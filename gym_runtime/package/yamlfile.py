"""Read a YAML file from an untrusted package safely: one function, one error type.

``load_yaml_file`` decodes UTF-8, parses with ``yaml.safe_load`` and then checks the result:
no recursive aliases, no more than :data:`MAX_NODES` values once aliases are expanded
("billion laughs" would otherwise expand in OmegaConf or pydantic), nesting no deeper than
:data:`MAX_DEPTH` (OmegaConf and pydantic recurse). With ``plain=True`` it also rejects
values that are not JSON types (YAML timestamps, ``!!binary``, ``!!set``), since configs are
dumped as JSON and sent to servers. Every problem is a :class:`YamlProblem` whose message
starts with a verb phrase to follow the file name, e.g. ``is not valid YAML at line 2, column 5: ...``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_NODES = 200_000
MAX_DEPTH = 64
_PLAIN = (str, int, float, bool, type(None))


class YamlProblem(ValueError):
    """The file cannot be used; ``str(e)`` says why (to be prefixed by the file name)."""


def parse_yaml(text: str) -> Any:
    """``yaml.safe_load`` with every failure turned into :class:`YamlProblem` (with line/column)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).strip().splitlines()[0]
        ctx, cmark = getattr(e, "context", None), getattr(e, "context_mark", None)
        if ctx and cmark:
            problem += f" ({ctx} at line {cmark.line + 1}, column {cmark.column + 1})"
        raise YamlProblem(f"is not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise YamlProblem(f"nests deeper than {MAX_DEPTH} levels") from None
    except (ValueError, TypeError, OverflowError) as e:  # e.g. an integer literal with 5,000 digits
        raise YamlProblem(f"holds a value YAML cannot represent: {str(e).splitlines()[0]}") from None


def check_structure(data: Any, plain: bool = False) -> None:
    """Raise :class:`YamlProblem` for recursion, alias bombs, deep nesting or (``plain``) non-JSON types."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: Any, path: str, depth: int) -> int:
        if isinstance(node, (dict, list)):
            if id(node) in active:
                raise YamlProblem(f"has a recursive YAML alias at {path or 'the top level'}")
            if id(node) in sizes:
                return sizes[id(node)]
            if depth > MAX_DEPTH:
                raise YamlProblem(f"nests deeper than {MAX_DEPTH} levels at {path}")
            active.add(id(node))
            items = node.items() if isinstance(node, dict) else enumerate(node)
            total = 1
            for k, v in items:
                if plain and isinstance(node, dict) and not isinstance(k, _PLAIN):
                    raise YamlProblem(f"has a key of unsupported type {type(k).__name__} at {path or 'the top'}")
                sub = f"{path}.{k}" if isinstance(node, dict) else f"{path}[{k}]"
                total += size(v, sub.lstrip("."), depth + 1)
                if total > MAX_NODES:
                    raise YamlProblem(
                        f"expands to more than {MAX_NODES} values (YAML aliases?) at {path or 'the top level'}"
                    )
            active.discard(id(node))
            sizes[id(node)] = total
            return total
        if plain and not isinstance(node, _PLAIN):
            raise YamlProblem(
                f"has a value of unsupported type {type(node).__name__} at {path} (quote it to make it a string)"
            )
        return 1

    size(data, "", 0)


def load_yaml_file(path: Path, plain: bool = False) -> Any:
    """Read, decode, parse and check ``path``; raises :class:`YamlProblem` or ``OSError``."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise YamlProblem(f"is not UTF-8 text (invalid byte at offset {e.start})") from None
    data = parse_yaml(text)
    check_structure(data, plain)
    return data
