"""Container values of ``key=value`` overrides, read as NeMo Gym's Hydra reads them.

Gym parses its command line with Hydra, whose override grammar reads a value that opens with ``{``
or ``[`` as a dict or a list (``fan_out={K:[A,B]}``, ``+agent_map={a:b}``): no space is needed
after a key's ``:``; ``1``, ``2.5``, ``true``, ``null`` are typed, other unquoted words are strings
(surrounding blanks dropped); ``'...'`` and ``"..."`` are strings; ``${...}`` is kept as written,
for OmegaConf to resolve after merging (Hydra ``OverrideParser``: ``element: primitive |
quotedValue | listContainer | dictContainer``). YAML, which reads every other override value
(OmegaConf's dotlist rules), takes ``{a:b}`` for the key ``a:b`` without a value and refuses
``{K:[A,B]}``. hydra-core is not a dependency of the runtime: OmegaConf's own grammar, which has
the same element rules (Hydra's override grammar derives from it), reads these values.
"""

from __future__ import annotations

from typing import Any

from omegaconf import grammar_parser
from omegaconf.grammar_visitor import GrammarVisitor


class _Visitor(GrammarVisitor):
    """OmegaConf's element visitor with interpolations kept as their text (never resolved here)."""

    def __init__(self) -> None:
        super().__init__(node_interpolation_callback=None, resolver_interpolation_callback=None, memo=None)

    def visitInterpolation(self, ctx: Any) -> str:  # noqa: N802 (the ANTLR visitor's name)
        return ctx.getText()


def is_container(value: str) -> bool:
    """True when an override's value is a dict or list in Hydra's syntax (it opens with ``{`` or ``[``)."""
    return value.lstrip().startswith(("{", "["))


def parse_container(value: str) -> Any:
    """The dict or list ``value`` spells (module doc): ``"{K:[A,B]}"`` -> ``{"K": ["A", "B"]}``.
    Raises ``omegaconf.errors.GrammarParseError`` (an ``OmegaConfBaseException``) naming the
    token where the value stops being a Hydra element."""
    return _Visitor().visit(grammar_parser.parse(value.strip(), parser_rule="singleElement", lexer_mode="VALUE_MODE"))
