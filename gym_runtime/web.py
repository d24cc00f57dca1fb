"""What the daemon's two HTTP apps (the head server, the task-sandbox API) share on top of Starlette:
request values validated by pydantic, and JSON answers written by pydantic.

Both apps are plain Starlette, not FastAPI, for the daemon's memory (docs/architecture.md §7.3).
These helpers answer clients as FastAPI (0.165) does: a validation error lists pydantic's errors
(``{"type", "loc", "msg", "input", "ctx"?}``, ``loc`` led by ``query``, ``path`` or ``body``), a
body is parsed as JSON only under a JSON content type, and an endpoint's answer is serialized by
pydantic (compact; NaN and Infinity as null; paths and dates as strings).
"""

from __future__ import annotations

import email.message
import json
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

T = TypeVar("T")
_ANY: TypeAdapter[Any] = TypeAdapter(Any)


class InvalidRequest(Exception):
    """A request value that failed validation; ``errors``: pydantic's error dicts, ``loc`` led by
    where the value was (``query``, ``path``, ``body``)."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors)
        self.errors = errors

    def jsonable(self) -> list[dict[str, Any]]:
        """``errors`` as JSON values (``loc`` a list; ``ctx`` values that are not JSON as text)."""
        return json.loads(json.dumps(self.errors, default=str))


def validated(adapter: TypeAdapter[T], value: Any, *loc: str | int) -> T:
    """``value`` through ``adapter`` (pydantic's lax mode, attributes read from objects); raises
    :class:`InvalidRequest` with each error's ``loc`` led by ``loc``."""
    try:
        return adapter.validate_python(value, from_attributes=True)
    except ValidationError as e:
        raise InvalidRequest([{**err, "loc": (*loc, *err["loc"])} for err in e.errors(include_url=False)]) from None


def query_value(request: Request, name: str, adapter: TypeAdapter[T], default: Any = ...) -> T:
    """The query parameter ``name`` (its last value) through ``adapter``; ``default`` when absent,
    else the error ``missing``. Raises :class:`InvalidRequest`."""
    raw = request.query_params.get(name)
    if raw is None:
        if default is ...:
            raise InvalidRequest([{"type": "missing", "loc": ("query", name), "msg": "Field required", "input": None}])
        return default
    return validated(adapter, raw, "query", name)


async def json_body(request: Request) -> Any:
    """The body, parsed as JSON when its content type is ``application/json`` or ``+json``, else
    its bytes. Raises :class:`InvalidRequest` (``missing`` for an empty body, ``json_invalid`` at the
    parser's position) or ``HTTPException`` 400 for a body no JSON parser can read (not UTF-8, too
    deeply nested)."""
    raw = await request.body()
    if not raw:
        raise InvalidRequest([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    kind = email.message.Message()
    kind["content-type"] = request.headers.get("content-type", "")
    subtype = kind.get_content_subtype()
    if not kind["content-type"] or kind.get_content_maintype() != "application":
        return raw
    if subtype != "json" and not subtype.endswith("+json"):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise InvalidRequest(
            [
                {
                    "type": "json_invalid",
                    "loc": ("body", e.pos),
                    "msg": "JSON decode error",
                    "input": {},
                    "ctx": {"error": e.msg},
                }
            ]
        ) from None
    except (ValueError, RecursionError):
        raise HTTPException(400, "There was an error parsing the body") from None


class PydanticJSONResponse(JSONResponse):
    """JSON as pydantic writes it: compact, UTF-8, NaN and Infinity as null, paths and dates as text."""

    def render(self, content: Any) -> bytes:
        return _ANY.dump_json(content)
