r"""Write resolved values so that OmegaConf resolves them to themselves (case C29).

The daemon resolves the merged config once and hands every server the *resolved* values in
``NEMO_GYM_CONFIG_DICT`` (and Gym clients the same through the head server). Gym's servers load
that YAML with ``OmegaConf.create`` and resolve it again (NeMo Gym 0.4.0
``nemo_gym/server_utils.py``, ``load_config_from_global_config``: ``to_container(resolve=True)``).
A value the author escaped as documented (``'Compare \${candidate}'``, OmegaConf's grammar:
"Escaping interpolations") is the literal ``Compare ${candidate}`` after the first resolution,
and a second one would try to interpolate ``candidate``.

So every string is written in escaped form: before each ``${`` the preceding backslashes are
doubled and one more is added. In OmegaConf's top-level string grammar a backslash only escapes
``${`` or another backslash directly before ``${``; everywhere else it is a literal character.
The result resolves to the original string on every resolution (the stored text never changes).
"""

from __future__ import annotations

import re
from typing import Any

_INTERP_START = re.compile(r"(\\*)\$\{")


def escape_string(text: str) -> str:
    r"""``text`` written so that OmegaConf resolves it to exactly ``text``.

    ``'a ${x}'`` -> ``'a \${x}'``; ``'a \${x}'`` (a literal backslash before ``${``) ->
    ``'a \\\${x}'``; a string without ``${`` is returned unchanged.
    """
    return _INTERP_START.sub(lambda m: m.group(1) * 2 + "\\${", text)


def escape_interpolations(node: Any) -> Any:
    """A copy of a resolved plain container (dicts, lists, scalars) with every string value
    escaped by :func:`escape_string`; keys are left alone (OmegaConf never interpolates keys)."""
    if isinstance(node, dict):
        return {k: escape_interpolations(v) for k, v in node.items()}
    if isinstance(node, list):
        return [escape_interpolations(v) for v in node]
    if isinstance(node, str):
        return escape_string(node)
    return node
