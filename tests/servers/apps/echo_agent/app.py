"""Test fixture (an agent a test controls): ``POST /run`` and ``POST /aggregate_metrics`` answer
what they received, ``{"path", "body" (the raw text), "headers", "cookies"}``, with the HTTP status
the request's ``x-echo-status`` header asks for (default 200), a header ``x-echo: yes`` and two
``Set-Cookie`` fields; ``x-echo-raw: TEXT`` answers TEXT as ``text/plain`` instead."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "servers"))

from _kit.server import build_app, run_server  # noqa: E402
from fastapi import Request, Response  # noqa: E402


def create_app(ctx):
    app = build_app(ctx, "echo_agent", sessions=False)

    async def echo(request: Request) -> Response:
        raw = request.headers.get("x-echo-raw")
        text = (
            raw
            if raw is not None
            else json.dumps(
                {
                    "path": request.url.path,
                    "body": (await request.body()).decode(),
                    "headers": dict(request.headers),
                    "cookies": dict(request.cookies),
                }
            )
        )
        reply = Response(
            text,
            status_code=int(request.headers.get("x-echo-status", "200")),
            media_type="text/plain" if raw is not None else "application/json",
            headers={"x-echo": "yes"},
        )
        reply.set_cookie("first", "1")
        reply.set_cookie("second", "2")
        return reply

    app.post("/run")(echo)
    app.post("/aggregate_metrics")(echo)
    return app


if __name__ == "__main__":
    run_server("responses_api_agents", create_app)
