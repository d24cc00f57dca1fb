"""``resources_servers/example_code_lookup``: a tool the agent must call; the reward checks the answer.

Tool ``POST /get_code {"key": str}`` -> ``{"key", "code"}``, where ``code`` is a fixed function of
the key and the config's ``salt`` (so it cannot be guessed without calling the tool).
``POST /verify``: reward 1.0 when the agent called ``get_code`` for the expected key and its final
message contains that key's code, else 0.0. The expected key is the row's ``key`` field, else the
first quoted word of the last user message. Extra fields in the answer: ``expected_code``,
``called_tool``.
Config keys: ``domain`` (Gym's required field, ``agent``), ``salt`` (default ``gym``).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from _kit.resources import VerifyRequest, add_resources_routes, final_text, function_calls, last_user_text  # noqa: E402
from _kit.server import ServerContext, build_app, run_server  # noqa: E402
from pydantic import BaseModel, ConfigDict  # noqa: E402


class CodeLookupConfig(BaseModel):
    """Instance config."""

    model_config = ConfigDict(extra="allow")
    domain: str = "agent"
    salt: str = "gym"


class GetCodeRequest(BaseModel):
    """Arguments of the ``get_code`` tool."""

    key: str


def code_for(key: str, salt: str) -> str:
    """The secret code of ``key``: ``CODE-`` and six hex digits."""
    return "CODE-" + hashlib.sha256(f"{salt}:{key.strip().lower()}".encode()).hexdigest()[:6].upper()


def expected_key(body: VerifyRequest) -> str | None:
    """The key a row asks about: its ``key`` field, else the first quoted text of the prompt."""
    extra = body.model_extra or {}
    if isinstance(extra.get("key"), str):
        return extra["key"]
    quoted = re.search(r"[\"“']([^\"”']+)[\"”']", last_user_text(body.responses_create_params))
    return quoted.group(1) if quoted else None


def create_app(ctx: ServerContext):
    """The FastAPI app of this server."""
    config = ctx.parse(CodeLookupConfig)
    app = build_app(ctx, "example_code_lookup")

    @app.post("/get_code")
    async def get_code(body: GetCodeRequest) -> dict:
        return {"key": body.key, "code": code_for(body.key, config.salt)}

    async def verify(body: VerifyRequest) -> dict:
        key = expected_key(body)
        if key is None:
            return {"reward": 0.0, "expected_code": None, "called_tool": False}
        code = code_for(key, config.salt)
        called = False
        for call in function_calls(body.response):
            try:
                arguments = json.loads(call.get("arguments") or "")
            except json.JSONDecodeError:
                continue
            if (
                call.get("name") == "get_code"
                and isinstance(arguments, dict)
                and str(arguments.get("key", "")).strip().lower() == key.strip().lower()
            ):
                called = True
        reward = 1.0 if called and code in final_text(body.response) else 0.0
        return {"reward": reward, "expected_code": code, "called_tool": called}

    add_resources_routes(app, verify)
    return app


if __name__ == "__main__":
    run_server("resources_servers", create_app)
