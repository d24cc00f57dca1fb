"""What the stub model says: a tiny, seedable "policy" for the example environments.

Given a chat request and a random generator, :func:`generate` returns one assistant turn:

- tools offered and no tool result since the last user message -> a call of the first tool, with
  arguments filled from its JSON schema and the user's text (quoted text or the last word for a
  string, the first number for a number);
- a tool result present -> a final message that echoes the last tool output with probability
  ``p`` ("correct"), else a message that does not;
- no tools -> if the last user message holds an arithmetic expression, "The answer is N." with
  the right value with probability ``p``, a value off by a small amount otherwise; no expression
  -> "I don't know." (always the same, so such a prompt has no reward spread).

Directives in any system/developer/user text tune one request: ``[stub:p=0.8]`` sets ``p``,
``[stub:bad_tool_args]`` makes the tool call's arguments invalid JSON, ``[stub:error=503]`` makes
the server answer that HTTP status. Misbehaviours a real policy shows (the stub's modes, also
given for every request with ``--mode NAME=VALUE``; see :mod:`gym_runtime.stub_model.quirks`):
``[stub:call=NAME]`` calls tool NAME whether offered or not (then answers with the ``expected``
value a tool output leaked, if any), ``[stub:tool_args=KIND]`` sends arguments of that shape,
``[stub:overflow=ID]`` answers vLLM's context-overflow error of that wording, ``[stub:think=SHAPE]``
puts reasoning into the content with ``<think>`` tags, ``[stub:reasoning=FIELD]`` returns it in
that field only. ``[stub:echo_block]`` makes the answer the last fenced code block (```` ```lang
... ``` ````) of the last user message, verbatim: a row can carry the code a coding environment
should receive, as a model that writes it would answer. Temperature 0 is greedy: the likelier
branch (correct iff ``p >= 0.5``) every time.
"""

from __future__ import annotations

import ast
import operator
import random
import re
from dataclasses import dataclass, field
from typing import Any

from gym_runtime.stub_model import quirks
from gym_runtime.stub_model.tokenizer import content_text

_DIRECTIVE_RE = re.compile(r"\[stub:([a-z_]+)(?:=([^\]]*))?\]")
_BLOCK_RE = re.compile(r"```[\w.+-]*\n.*?\n```", re.S)  # a fence opens a line: ``` + language
_EXPR_RE = re.compile(r"[\d(][\d\s.+\-*/()×]*[\d)]")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


@dataclass
class Turn:
    """One generated assistant turn: text and/or tool calls (``{"name", "arguments"}``)."""

    content: str | None = None
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    reasoning: str | None = None


@dataclass
class Directives:
    """Per-request knobs read from ``[stub:...]`` markers in the prompt."""

    p: float | None = None
    bad_tool_args: bool = False
    error_status: int | None = None
    echo_block: bool = False
    call: str | None = None
    tool_args: str | None = None
    overflow: str | None = None
    think: str | None = None
    reasoning: str | None = None

    def set(self, name: str, value: str) -> None:
        """Apply one directive ``name=value`` (unknown names are ignored)."""
        if name == "p":
            self.p = min(1.0, max(0.0, float(value)))
        elif name == "bad_tool_args":
            self.bad_tool_args = True
        elif name == "error":
            self.error_status = int(value)
        elif name == "echo_block":
            self.echo_block = True
        elif name in ("call", "tool_args", "overflow", "think", "reasoning"):
            setattr(self, name, value)


def read_directives(messages: list[dict], modes: tuple[str, ...] = ()) -> Directives:
    """Collect ``[stub:...]`` directives from system, developer and user messages, on top of the
    server's ``modes`` (``NAME=VALUE`` strings from ``--mode``)."""
    found = Directives()
    for mode in modes:
        name, _, value = mode.partition("=")
        found.set(name, value)
    for message in messages:
        if message.get("role") not in ("system", "developer", "user"):
            continue
        for name, value in _DIRECTIVE_RE.findall(content_text(message.get("content"))):
            found.set(name, value)
    return found


def _eval_node(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval_node(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval_node(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval_node(node.left), _eval_node(node.right))
    raise ValueError("not arithmetic")


def find_arithmetic(text: str) -> float | None:
    """Value of the last arithmetic expression (``+ - * / ×``, parentheses) in ``text``, or None."""
    value = None
    for match in _EXPR_RE.finditer(text):
        expr = match.group(0).replace("×", "*")
        if not any(op in expr for op in "+-*/"):
            continue
        try:
            value = _eval_node(ast.parse(expr.strip(), mode="eval"))
        except (SyntaxError, ValueError, ZeroDivisionError, RecursionError, MemoryError):
            continue  # too deep to evaluate (a sum of a thousand terms) is no expression to answer
    return value


def format_number(value: float) -> str:
    """``42`` for integral values, else up to 6 significant decimals."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.6g}"


def _argument_for(name: str, schema: dict, text: str) -> Any:
    kind = schema.get("type")
    if schema.get("enum"):
        return next((v for v in schema["enum"] if str(v).lower() in text.lower()), schema["enum"][0])
    if kind in ("integer", "number"):
        found = re.search(r"-?\d+(?:\.\d+)?", text)
        number = float(found.group(0)) if found else 0.0
        return int(number) if kind == "integer" else number
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return {}
    quoted = re.search(r"[\"“']([^\"”']+)[\"”']", text)
    if quoted:
        return quoted.group(1)
    words = re.findall(r"\w+", text)
    return words[-1] if words else name


def tool_arguments(tool: dict, text: str) -> dict:
    """Arguments for ``tool`` (a chat tool spec) built from its JSON schema and ``text``."""
    function = tool.get("function", tool)
    params = function.get("parameters") or {}
    properties = params.get("properties") or {}
    required = params.get("required") or list(properties)
    return {name: _argument_for(name, properties.get(name, {}), text) for name in required}


def generate(
    messages: list[dict],
    tools: list[dict] | None,
    rng: random.Random,
    p: float,
    greedy: bool,
    directives: Directives | None = None,
) -> Turn:
    """One assistant turn for ``messages`` (see the module docstring for the rules)."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    user_text = content_text(messages[last_user].get("content")) if last_user >= 0 else ""
    user_text = _DIRECTIVE_RE.sub("", user_text)
    tool_results = [m for m in messages[last_user + 1 :] if m.get("role") == "tool"]
    directives = directives or read_directives(messages)
    p = directives.p if directives.p is not None else p
    correct = p >= 0.5 if greedy else rng.random() < p

    blocks = _BLOCK_RE.findall(user_text) if directives.echo_block else []
    if blocks:
        return Turn(content=blocks[-1], reasoning="I will write the code.")
    if (tools or directives.call) and not tool_results:
        tool = next(
            (t for t in tools or [] if t.get("function", t).get("name") == directives.call),
            None if directives.call or not tools else tools[0],
        )
        name = directives.call or (tool.get("function", tool).get("name", "") if tool else "")
        proper = tool_arguments(tool, user_text) if tool else quirks.grader_body(user_text)
        arguments = quirks.tool_arguments_of(directives.tool_args, proper)
        if directives.bad_tool_args:
            arguments = arguments[:-1]
        return Turn(tool_calls=[{"name": name, "arguments": arguments}], reasoning=f"I should call {name}.")
    leaked = quirks.leaked_expected(tool_results[-1].get("content")) if tool_results and directives.call else None
    if leaked is not None:
        return Turn(content=f"The answer is {leaked}", reasoning="The tool told me the expected answer.")
    if tool_results:
        if correct:
            output = content_text(tool_results[-1].get("content"))
            return Turn(content=f"The tool returned: {output}", reasoning="I will report the tool output.")
        return Turn(content="I could not find the answer.", reasoning="The tool output looks unclear.")
    value = find_arithmetic(user_text)
    if value is None:
        return Turn(content="I don't know.", reasoning="There is nothing to compute.")
    if not correct:
        value += rng.choice([-2, -1, 1, 2])
    return Turn(content=f"The answer is {format_number(value)}.", reasoning="Let me compute the expression.")
