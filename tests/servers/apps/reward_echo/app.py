"""Test fixture (environment code a test controls): a resources server that answers ``/verify`` with
the reward the row asks for, written as raw JSON (``reward_json``: ``NaN``, ``null``, ``"1"``...;
``drop_reward: true``: no reward at all), a tool ``POST /echo`` answering its arguments, and
``GET /calls`` counting the routes hit (to prove a refused call reached nothing)."""

import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "servers"))

from _kit.server import build_app, run_server  # noqa: E402
from fastapi import Request, Response  # noqa: E402


def create_app(ctx):
    app = build_app(ctx, "reward_echo")
    calls: Counter = Counter()

    @app.middleware("http")
    async def count(request: Request, call_next):
        calls[request.url.path] += 1
        return await call_next(request)

    @app.get("/calls")
    async def seen() -> dict:
        return dict(calls)

    @app.post("/seed_session")
    async def seed_session() -> dict:
        return {}

    @app.post("/echo")
    async def echo(request: Request) -> Response:
        return Response(await request.body(), media_type="application/json")

    @app.post("/verify")
    async def verify(request: Request) -> Response:
        body = await request.json()
        text = json.dumps(body)
        if not body.get("drop_reward"):
            text = text[:-1] + ', "reward": ' + body.get("reward_json", "1.0") + "}"
        return Response(text, media_type="application/json")

    return app


if __name__ == "__main__":
    run_server("resources_servers", create_app)
