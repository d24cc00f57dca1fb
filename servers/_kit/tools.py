"""Which function calls an agent executes: only tools the row offered, with a JSON object as arguments.

A function call is model output, so it is untrusted (docs/rollouts.md, "The agent executes only
what it offered"). :func:`check_call` decides, for one ``function_call`` item of a Responses
output, either *execute* (``Call.arguments`` is the parsed JSON object to POST to
``/<name>`` on the resources server) or *refuse* (``Call.refusal`` is the tool output fed back
to the model; nothing is sent anywhere):

- the name must be a function tool of the row's ``responses_create_params.tools`` (Responses
  shape ``{"type": "function", "name"}``, or Chat shape ``{"type": "function", "function":
  {"name"}}``); any other name is an *unknown tool* (``{"error": "unknown tool 'x'; available:
  [...]"}``);
- the resources server's own routes (:data:`CONTROL_ROUTES`: ``seed_session``, ``verify``,
  ``aggregate_metrics``, ...) are never tools, even when a row offers one by that name, and a
  name must match OpenAI's function-name rule ``^[A-Za-z0-9_-]{1,64}$`` (so no ``/``, ``..``,
  ``?``, ``#``): both are unknown tools too;
- arguments: an empty string (or null) means ``{}``; a JSON object is used as is; anything else
  (invalid JSON, a list, a bare string or number, nesting too deep for the parser, more than
  ``max_bytes`` bytes) is *invalid arguments*: ``{"error": "Invalid tool call arguments for
  'x': ..."}`` saying what was wrong; in executed arguments, code points that are no text (a
  lone surrogate from a ``\\ud83d`` escape, NUL, control characters) are replaced by U+FFFD and
  counted (``Call.repaired_text``, ``_kit/text.py``).

Gym 0.4.0's own ``responses_api_agents/simple_agent/app.py`` posts every call to
``/<name>`` unchecked (so ``verify`` reaches the grader, case C31) and only catches
``json.loads`` failures (an empty string is an error there, a list is posted as the body).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from _kit.text import repaired

# Routes every Gym resources server has (NeMo Gym 0.4.0 ``nemo_gym/base_resources_server.py``) and
# FastAPI's own pages: never reachable as tools.
CONTROL_ROUTES = frozenset(
    {
        "seed_session",
        "verify",
        "aggregate_metrics",
        "reverify_mode",
        "run",
        "docs",
        "redoc",
        "openapi",
        "openapi.json",
        "health",
        "v1",
    }
)
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_ARGUMENT_BYTES = 1_000_000
UNKNOWN, INVALID = "unknown_tool", "invalid_arguments"


@dataclass(frozen=True)
class Call:
    """The decision on one function call: ``arguments`` to send (execute) or ``refusal`` (the tool
    output to feed back); ``kind`` is :data:`UNKNOWN`, :data:`INVALID` or None (executed)."""

    name: str
    call_id: str
    arguments: dict[str, Any] | None = None
    refusal: str | None = None
    kind: str | None = None
    repaired_text: int = 0  # code points of the parsed arguments that were no text, now U+FFFD (``_kit/text.py``)


def offered_tools(params: dict[str, Any]) -> list[str]:
    """Names of the function tools a request offers that can be executed (sorted, deduplicated)."""
    names = set()
    for tool in params.get("tools") or []:
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            continue
        function = tool.get("function")
        name = tool.get("name") if "name" in tool else function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str) and executable_name(name):
            names.add(name)
    return sorted(names)


def executable_name(name: Any) -> bool:
    """True when ``name`` could be a tool route: OpenAI's function-name rule, not a control route."""
    return isinstance(name, str) and bool(NAME_RE.match(name)) and name not in CONTROL_ROUTES


def _shown(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...'"


def _refuse(name: str, call_id: str, kind: str, message: str) -> Call:
    return Call(name, call_id, refusal=json.dumps({"error": message}), kind=kind)


def parse_arguments(raw: Any, max_bytes: int = MAX_ARGUMENT_BYTES) -> tuple[dict[str, Any] | None, str | None]:
    """``(arguments, None)`` for a usable JSON object, else ``(None, what was wrong)``."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if isinstance(raw, dict):
        return raw, None
    if not isinstance(raw, str):
        return None, f"arguments must be a JSON object in a string, got {type(raw).__name__}"
    size = len(raw.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return None, f"arguments are {size} bytes, more than the limit of {max_bytes}"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    except RecursionError:
        return None, "the JSON is nested too deeply"
    if not isinstance(value, dict):
        kind = {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")
        return None, f"arguments must be a JSON object, got {kind}"
    return value, None


def check_call(item: dict[str, Any], offered: list[str], max_bytes: int = MAX_ARGUMENT_BYTES) -> Call:
    """The decision on one ``function_call`` output item given the ``offered`` tool names."""
    name = item.get("name")
    call_id = str(item.get("call_id") or item.get("id") or "")
    shown = name if isinstance(name, str) else repr(name)
    if not isinstance(name, str) or name not in offered or not executable_name(name):
        why = "is a route of the resources server, not a tool" if name in CONTROL_ROUTES else ""
        message = (
            f"unknown tool {_shown(name)}; available: {offered}"
            if not why
            else f"unknown tool {_shown(name)} ({why}); available: {offered}"
        )
        return _refuse(shown, call_id, UNKNOWN, message)
    arguments, problem = parse_arguments(item.get("arguments"), max_bytes)
    if problem is not None:
        return _refuse(name, call_id, INVALID, f"Invalid tool call arguments for {name!r}: {problem}")
    arguments, fixed = repaired(arguments)  # a "\\ud83d" escape inside the arguments' own JSON
    return Call(name, call_id, arguments=arguments, repaired_text=fixed)
