"""A small OpenAI-compatible policy endpoint answering one payload a failure case names (tests only).

Run as its own process (``python -m tests.helpers.fake_policy --port P --behaviour NAME``;
:func:`start_fake` does it): ``GET /v1/models`` lists ``--model``, ``POST /v1/chat/completions``
answers as the behaviour says, ``POST /tokenize`` gives one id per whitespace-separated word of
the rendered messages (the fake's "tokenizer"), ``GET /fake/requests`` returns every chat body
received so far, ``GET /fake/headers`` their request headers. Behaviours (:data:`BEHAVIOURS`), each after a real endpoint's answer:

``ok``                    a tool call of the first offered tool when no tool result follows the last
                          user message, else an answer echoing the last tool output (or ``OK.``);
                          ``token_id:N`` logprobs when asked
``reasoning_only``        ``content: null``, ``reasoning: "Let me think..."``, ``finish_reason: stop``
                          on every call (C38)
``no_tool_parser``        400 ``"auto" tool choice requires --enable-auto-tool-choice and
                          --tool-call-parser to be set`` whenever ``tools`` is in the body, else ``ok`` (C40)
``tool_call_text``        ``<tool_call>{"name": "get_code", ...}</tool_call>`` left in ``content``,
                          no ``tool_calls`` (C41)
``duplicate_reasoning``   turn 1: reasoning in ``reasoning`` plus the tool call; any request whose
                          assistant message carries both ``reasoning`` and ``reasoning_content``: 400
                          ``duplicate field 'reasoning'`` (C42); else ``ok``
``abort_after_tool``      every call that follows a tool result: ``finish_reason: abort``, content
                          ``"Let me"`` (C43)
``abort_once``            the first call after a tool result of each conversation is aborted, the
                          next one answers (C43)
``text_tokens``           logprob tokens ``"The"``, ``" 42"`` (an endpoint that ignores
                          ``return_tokens_as_token_ids``, C44)
``digit_tokens``          logprob tokens ``"42"``, ``" 7"`` (C44)
``no_logprobs``           no ``logprobs`` at all (C44)
``tokenize_disagrees``    ``token_id:N`` logprobs, but ``/tokenize`` counts one token more than the
                          completion's usage (C44)
``not_text``              ``ok``'s answer with output that is no text: a lone surrogate (a split
                          ``\\ud83d`` escape), NUL and control characters in ``content`` (after the
                          right answer), ``reasoning`` and inside the tool call's ``arguments`` JSON
                          (``\\ud83d`` escaped twice, as a model writes it); ``POST /fake/text``
                          ``{"content", "reasoning", "name", "arguments"}`` replaces those strings
                          (``name``: the tool call's name instead of the offered tool's; ``arguments``:
                          the raw arguments text) for every later answer (the fuzz targets)
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

TOOL_PARSER_TEXT = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
DUPLICATE_TEXT = (
    "Failed to deserialize the JSON body into the target type: messages[2]: duplicate field "
    "`reasoning` at line 1 column 412"
)


def _words(messages: list[dict]) -> list[str]:
    text = " ".join(f"<{m.get('role')}> {m.get('content') or ''}" for m in messages if isinstance(m, dict))
    return text.split()


def _after_tool(messages: list[dict]) -> bool:
    roles = [m.get("role") for m in messages]
    last_user = max((i for i, r in enumerate(roles) if r == "user"), default=-1)
    return "tool" in roles[last_user + 1 :]


def _tool_name(body: dict) -> str | None:
    tools = body.get("tools") or []
    return tools[0]["function"]["name"] if tools else None


def _key(messages: list[dict]) -> str:
    user = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "") or ""
    quoted = [part for i, part in enumerate(str(user).split("'")) if i % 2 == 1]
    return quoted[0] if quoted else "alpha"


def completion(body: dict, message: dict, finish: str, tokens: list[str] | None = None) -> dict:
    """A chat completion of ``message``; logprobs when asked (``tokens``: their spelling)."""
    text = (message.get("content") or "") + json.dumps(message.get("tool_calls") or "")
    pieces = text.split() or ["OK"]
    choice: dict = {"index": 0, "message": {"role": "assistant", "tool_calls": [], **message}, "finish_reason": finish}
    if body.get("logprobs"):
        spelled = tokens or [f"token_id:{100 + int(hashlib.sha256(p.encode()).hexdigest()[:4], 16)}" for p in pieces]
        choice["logprobs"] = {
            "content": [{"token": t, "logprob": -0.5, "bytes": [], "top_logprobs": []} for t in spelled]
        }
    prompt = len(_words(body.get("messages") or []))
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model"),
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": len(choice.get("logprobs", {}).get("content", pieces)),
            "total_tokens": prompt + len(pieces),
        },
    }


def ok(body: dict, state: dict) -> dict:
    messages = body.get("messages") or []
    name = _tool_name(body)
    if name and not _after_tool(messages):
        call = {
            "id": f"call-{len(state['requests'])}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps({"key": _key(messages)})},
        }
        return completion(body, {"content": None, "tool_calls": [call]}, "tool_calls")
    last_tool = next((m.get("content") for m in reversed(messages) if m.get("role") == "tool"), None)
    return completion(body, {"content": f"The answer: {last_tool}" if last_tool else "OK."}, "stop")


def reasoning_only(body: dict, state: dict) -> dict:
    return completion(body, {"content": None, "reasoning": "Let me think..."}, "stop")


def no_tool_parser(body: dict, state: dict):
    if body.get("tools"):
        return JSONResponse(
            status_code=400,
            content={"error": {"message": TOOL_PARSER_TEXT, "type": "BadRequestError", "param": None, "code": 400}},
        )
    return ok(body, state)


def tool_call_text(body: dict, state: dict) -> dict:
    text = '<tool_call>\n{"name": "get_code", "arguments": {"key": "a"}}\n</tool_call>'
    return completion(body, {"content": text}, "stop")


def duplicate_reasoning(body: dict, state: dict):
    messages = body.get("messages") or []
    if any(m.get("role") == "assistant" and m.get("reasoning") and m.get("reasoning_content") for m in messages):
        return JSONResponse(status_code=400, content={"error": {"message": DUPLICATE_TEXT, "type": "invalid_request"}})
    answer = ok(body, state)
    if not any(m.get("role") == "assistant" for m in messages):
        answer["choices"][0]["message"]["reasoning"] = "I should look the code up."
    return answer


def abort_after_tool(body: dict, state: dict) -> dict:
    if _after_tool(body.get("messages") or []):
        return completion(body, {"content": "Let me"}, "abort")
    return ok(body, state)


def abort_once(body: dict, state: dict) -> dict:
    messages = body.get("messages") or []
    key = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
    if _after_tool(messages) and key not in state["aborted"]:
        state["aborted"].add(key)
        return completion(body, {"content": "Let me"}, "abort")
    return ok(body, state)


def text_tokens(body: dict, state: dict) -> dict:
    return completion(body, {"content": "The 42"}, "stop", tokens=["The", " 42"])


def digit_tokens(body: dict, state: dict) -> dict:
    return completion(body, {"content": "42 7"}, "stop", tokens=["42", " 7"])


def no_logprobs(body: dict, state: dict) -> dict:
    answer = ok(body, state)
    answer["choices"][0].pop("logprobs", None)
    return answer


NOT_TEXT = "\ud83d \x00\x07\x1b[0m"  # a lone high surrogate, NUL, BEL, ESC


def not_text(body: dict, state: dict) -> Response:
    """``ok``'s answer with the strings of ``state["text"]`` (module doc), sent with every non-ASCII
    code point as a JSON escape: the way a lone surrogate reaches a client."""
    text = state["text"]
    answer = ok(body, state)
    message = answer["choices"][0]["message"]
    message["reasoning"] = text.get("reasoning", "Thinking " + NOT_TEXT)
    if message.get("tool_calls"):
        call = message["tool_calls"][0]["function"]
        call["name"] = text.get("name", call["name"])
        raw = json.loads(call["arguments"])
        call["arguments"] = text.get("arguments", json.dumps({**raw, "note": NOT_TEXT}))
    else:
        message["content"] = (message.get("content") or "") + " " + text.get("content", NOT_TEXT)
    return Response(json.dumps(answer).encode(), media_type="application/json")


BEHAVIOURS = {
    f.__name__: f
    for f in (
        ok,
        reasoning_only,
        no_tool_parser,
        tool_call_text,
        duplicate_reasoning,
        abort_after_tool,
        abort_once,
        text_tokens,
        digit_tokens,
        no_logprobs,
        not_text,
    )
}
BEHAVIOURS["tokenize_disagrees"] = ok


def create_app(behaviour: str, model: str) -> FastAPI:
    """The fake endpoint's app (module doc)."""
    answer = BEHAVIOURS[behaviour]
    state: dict = {"requests": [], "headers": [], "aborted": set(), "text": {}}
    app = FastAPI()

    @app.get("/")
    async def root() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "fake"}]}

    @app.get("/fake/requests")
    async def requests() -> list:
        return state["requests"]

    @app.get("/fake/headers")
    async def headers() -> list:
        return state["headers"]

    @app.post("/fake/text")
    async def set_text(request: Request) -> dict:
        state["text"] = await request.json()
        return {}

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict:
        body = await request.json()
        ids = [100 + i for i, _ in enumerate(_words(body.get("messages") or []))]
        if behaviour == "tokenize_disagrees":
            ids.append(7)
        return {"count": len(ids), "max_model_len": 4096, "tokens": ids}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        state["requests"].append(body)
        state["headers"].append(dict(request.headers))
        return answer(body, state)

    return app


@contextlib.contextmanager
def start_fake(tmp: Path, behaviour: str, model: str = "acme-policy") -> Iterator:
    """Start the fake endpoint as a process on a free loopback port; yields a ``Running`` whose
    ``url`` is the server root (the OpenAI root is ``url + "/v1"``)."""
    from tests.helpers.gym_servers import REPO, free_port, spawn

    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "tests.helpers.fake_policy",
        "--port",
        str(port),
        "--behaviour",
        behaviour,
        "--model",
        model,
    ]
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)}
    with spawn(argv, REPO, env, f"http://127.0.0.1:{port}", tmp / f"fake-{behaviour}-{port}.log") as running:
        yield running


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--behaviour", choices=sorted(BEHAVIOURS), default="ok")
    parser.add_argument("--model", default="acme-policy")
    args = parser.parse_args()
    uvicorn.run(create_app(args.behaviour, args.model), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
