"""The head server's own description: ``GET /openapi.json`` (an OpenAPI 3.1 document of its routes)
and ``GET /docs`` (Swagger UI over that document, its script and style from the jsDelivr CDN,
read by the browser).

The document names each route's method, path parameters, query parameters and JSON body (their
JSON schemas from pydantic); what each answers is in :mod:`gym_runtime.head.app`'s table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

SWAGGER_UI = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5"
PAGE = """<!DOCTYPE html>
<html>
<head>
<link type="text/css" rel="stylesheet" href="{ui}/swagger-ui.css">
<title>{title} - Swagger UI</title>
</head>
<body>
<div id="swagger-ui"></div>
<script src="{ui}/swagger-ui-bundle.js"></script>
<script>
SwaggerUIBundle({{url: "/openapi.json", dom_id: "#swagger-ui", layout: "BaseLayout", deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset]}})
</script>
</body>
</html>
"""


def document(
    routes: list[Route],
    title: str,
    description: str,
    bodies: Mapping[str, TypeAdapter[Any]],
    queries: Mapping[str, Mapping[str, TypeAdapter[Any]]],
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes``: ``bodies`` maps a path to its JSON body's type,
    ``queries`` a path to its query parameters' types."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        parameters = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in re.findall(r"{(\w+)", route.path)
        ] + [
            {"name": name, "in": "query", "required": False, "schema": adapter.json_schema()}
            for name, adapter in queries.get(route.path, {}).items()
        ]
        for method in sorted(route.methods or ()):
            operation: dict[str, Any] = {
                "summary": route.name.replace("_", " ").capitalize(),
                "operationId": f"{route.name}_{method.lower()}",
                "responses": {"200": {"description": "Successful Response"}},
            }
            if parameters:
                operation["parameters"] = parameters
            if route.path in bodies:
                schema = bodies[route.path].json_schema()
                operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
            paths.setdefault(route.path, {})[method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "description": description, "version": "0.1.0"},
        "paths": paths,
    }


def routes(
    served: list[Route],
    title: str,
    description: str,
    bodies: Mapping[str, TypeAdapter[Any]],
    queries: Mapping[str, Mapping[str, TypeAdapter[Any]]],
) -> list[Route]:
    """``GET /openapi.json`` (the :func:`document` of ``served``, made at the first request) and
    ``GET /docs``."""
    made: list[dict[str, Any]] = []

    async def openapi(request: Request) -> Response:
        if not made:
            made.append(document(served, title, description, bodies, queries))
        return JSONResponse(made[0])

    async def docs(request: Request) -> Response:
        return HTMLResponse(PAGE.format(ui=SWAGGER_UI, title=title))

    return [Route("/openapi.json", openapi, include_in_schema=False), Route("/docs", docs, include_in_schema=False)]
