"""``resources_servers/example_arithmetic``: single turn, the final answer is checked.

No tools. ``POST /verify``: reward 1.0 when the last number in the final assistant message equals
the expected value (within 1e-6), else 0.0. The expected value is the row's ``answer`` field
(a number or numeric string), else the value of the last arithmetic expression (``+ - * /``,
parentheses) in the last user message. Extra fields in the answer: ``expected``, ``extracted``.
Config keys: ``domain`` (Gym's required field, ``math``).
"""

from __future__ import annotations

import ast
import operator
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from _kit.resources import VerifyRequest, add_resources_routes, final_text, last_user_text  # noqa: E402
from _kit.server import ServerContext, build_app, run_server  # noqa: E402
from pydantic import BaseModel, ConfigDict  # noqa: E402

_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")
_EXPR_RE = re.compile(r"[\d(][\d\s.+\-*/()]*[\d)]")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


class ArithmeticConfig(BaseModel):
    """Instance config."""

    model_config = ConfigDict(extra="allow")
    domain: str = "math"


def evaluate(node: ast.AST) -> float:
    """Value of an arithmetic AST (numbers, unary minus, + - * /); ``ValueError`` otherwise."""
    if isinstance(node, ast.Expression):
        return evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return -evaluate(node.operand) if isinstance(node.op, ast.USub) else evaluate(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](evaluate(node.left), evaluate(node.right))
    raise ValueError("not arithmetic")


def expression_value(text: str) -> float | None:
    """Value of the last arithmetic expression with an operator in ``text``, or None."""
    value = None
    for match in _EXPR_RE.finditer(text):
        expr = match.group(0).strip()
        if any(op in expr for op in "+-*/"):
            try:
                value = evaluate(ast.parse(expr, mode="eval"))
            except (SyntaxError, ValueError, ZeroDivisionError, RecursionError, MemoryError):
                continue  # not arithmetic this server evaluates (e.g. a sum of a thousand terms: too deep)
    return value


def expected_value(body: VerifyRequest) -> float | None:
    """The row's ``answer`` when numeric, else the prompt's expression value."""
    answer = (body.model_extra or {}).get("answer")
    if answer not in (None, ""):
        try:
            return float(answer)
        except (TypeError, ValueError):
            return None
    return expression_value(last_user_text(body.responses_create_params))


def create_app(ctx: ServerContext):
    """The FastAPI app of this server."""
    ctx.parse(ArithmeticConfig)
    app = build_app(ctx, "example_arithmetic")

    async def verify(body: VerifyRequest) -> dict:
        expected = expected_value(body)
        numbers = _NUMBER_RE.findall(final_text(body.response))
        extracted = float(numbers[-1]) if numbers else None
        correct = expected is not None and extracted is not None and abs(extracted - expected) < 1e-6
        return {"reward": 1.0 if correct else 0.0, "expected": expected, "extracted": extracted}

    add_resources_routes(app, verify)
    return app


if __name__ == "__main__":
    run_server("resources_servers", create_app)
