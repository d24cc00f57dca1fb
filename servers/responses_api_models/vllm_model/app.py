"""``responses_api_models/vllm_model``: the policy model server (docs/architecture.md §8; NeMo Gym
0.7.0 ``responses_api_models/vllm_model/app.py`` and ``nemo_gym/base_responses_api_model.py``).

Endpoints, each also under NeMo Gym 0.7's rollout prefix ``/ng-rollout/<id>[/training-token-capture]``
(``_kit/rollout_path.py``):

- ``POST /v1/responses``: Responses API -> upstream ``/chat/completions`` (``/completions`` with
  ``use_completions_api``; the request as it is to ``/responses`` with ``is_responses_native``) ->
  Responses; ``stream: true`` answers the same as server-sent events (``_kit/sse.py``);
- ``POST /v1/chat/completions``: pass-through with the same pre/post-processing (``stream: true``:
  chunks);
- ``POST /v1/messages``: Anthropic's Messages API on top of ``/v1/responses`` (``_kit/messages_api.py``);
- ``GET /``.

Config keys (``config_schema.py``; an unknown key is an error): docs/rollouts.md, "The model
server's surface". What the upstream's answers mean (retries, context overflow, reasoning, aborted
completions, token ids, refusals naming a flag): ``model.py`` and docs/rollouts.md. A call under
the training-token-capture prefix while ``token_id_capture.enabled`` is recorded in NeMo Gym's
file store (``_kit/token_capture.py``); its token ids are asked for even when
``return_token_id_information`` is false (and then left out of the answer). A completion that ends
``finish_reason: tool_calls`` with no tool call parsed (vLLM with a reasoning parser and
``tool_choice: required``: the forced call is written inside the reasoning) carries
``unparsed_tool_calls: 1`` on the Responses object, which the agent counts. Code points of the
upstream's answer that are no text (a lone surrogate from a split ``\\ud83d`` escape, NUL, control
characters) are replaced by U+FFFD and counted as ``repaired_text`` on the answer (``_kit/text.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _kit import messages_api, sse  # noqa: E402
from _kit.config import StartupError  # noqa: E402
from _kit.overflow import classify  # noqa: E402
from _kit.peers import UpstreamError  # noqa: E402
from _kit.responses import TOKEN_FIELDS, to_chat_request, to_response  # noqa: E402
from _kit.server import ServerContext, TextJSONResponse, build_app, error_body, run_server  # noqa: E402
from _kit.token_capture import TokenCapture, capture_dir  # noqa: E402
from fastapi import Request  # noqa: E402
from fastapi.responses import StreamingResponse  # noqa: E402
from model import Propagated, VLLMModel  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402


def _invalid(message: str) -> TextJSONResponse:
    return TextJSONResponse(status_code=422, content=error_body("invalid_request", message))


def unreadable_as_value_error(shape, *args: Any) -> Any:
    """``shape(*args)`` (a request shaping step over the row's own fields); a row it cannot read
    (an ``input`` that is a number, an item of the wrong type, a ``function_call`` without its
    ``call_id``: ``TypeError``, ``KeyError``, ``AttributeError``) is a ``ValueError`` naming what
    failed, answered 422: the row's data, never a 500 a trainer would retry as infrastructure."""
    try:
        return shape(*args)
    except (TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"the request cannot be read: {type(exc).__name__}: {exc}") from None


def _strip_tokens(items: list[dict]) -> None:
    for item in items:
        for field in TOKEN_FIELDS:
            item.pop(field, None)


def _is_context_length_error(status: int | None, body: Any) -> bool:
    """True when an upstream error answer (HTTP ``status``, JSON ``body``) says the prompt does not
    fit (vLLM's wordings, ``_kit/overflow.py``); the entry case C30's own check script
    (``tests/cases/data/C30/check_classifier.py``) asks this module for."""
    return classify(status, body) is not None


class Server:
    """The routes' logic: one model, the capture writer (or None) and the config flags."""

    def __init__(self, ctx: ServerContext) -> None:
        self.model = VLLMModel(ctx)
        self.config = self.model.config
        try:
            root = capture_dir(OmegaConf.to_container(ctx.global_config, resolve=True))
        except ValueError as exc:
            raise StartupError(f"'{ctx.name}': {exc}") from None
        self.capture = TokenCapture(root, self.config.model) if root else None

    def call_id(self, request: Request) -> str | None:
        """A capture call id when this request is captured (module doc), else None."""
        state = request.state
        if self.capture is None or not getattr(state, "token_capture", False) or not state.rollout_id:
            return None
        return self.capture.begin(state.rollout_id)

    def commit(self, request: Request, call_id: str | None, items: list, payload: dict) -> None:
        if call_id is not None:
            self.capture.commit(request.state.rollout_id, call_id, items, payload)

    async def chat(self, request: Request, body: dict) -> dict:
        call_id = self.call_id(request)
        completion = await self.model.chat(body, request.state.session_id, capture=call_id is not None)
        self.commit(request, call_id, body.get("messages") or [], completion)
        if not self.config.return_token_id_information:
            _strip_tokens([c.get("message") or {} for c in completion.get("choices") or []])
        return completion

    async def responses(self, request: Request, body: dict) -> dict:
        """The Responses object for ``body``; ``ValueError`` for a request with no chat form."""
        if self.config.is_responses_native:
            return await self.model.native(body, request.state.session_id)
        chat_body = unreadable_as_value_error(to_chat_request, body, self.config.return_token_id_information)
        call_id = self.call_id(request)
        completion = await self.model.chat(chat_body, request.state.session_id, capture=call_id is not None)
        tokens = self.config.return_token_id_information or call_id is not None
        response = to_response(
            {**body, "model": self.config.model}, completion, self.config.uses_reasoning_parser, tokens
        )
        for key in ("context_overflow", "aborted_calls", "repaired_text"):
            if completion.get(key):
                response[key] = completion[key]
        choice = completion["choices"][0]
        if choice.get("finish_reason") == "tool_calls" and not (choice.get("message") or {}).get("tool_calls"):
            response["unparsed_tool_calls"] = 1  # the engine ended on a tool call its parser did not extract
        items = body["input"] if isinstance(body["input"], list) else []
        self.commit(request, call_id, items, response)
        if not self.config.return_token_id_information:
            _strip_tokens(response["output"])
        return response


def _stream(events) -> StreamingResponse:
    return StreamingResponse(events, media_type=sse.MEDIA_TYPE, headers=sse.HEADERS)


def create_app(ctx: ServerContext):
    """The FastAPI app of this server."""
    server = Server(ctx)
    app = build_app(ctx, "vllm_model")

    async def answer(request: Request, work, stream: str | None):
        """``work()``'s answer as JSON or as the ``stream`` kind of event stream; an upstream
        answer to pass on as it is (``propagate_context_overflow_errors``) keeps its status."""
        try:
            result = await work()
        except Propagated as exc:
            return TextJSONResponse(status_code=exc.status, content=exc.body)
        except ValueError as exc:
            return _invalid(str(exc))
        except UpstreamError as exc:
            if stream != "responses":
                raise
            return _stream(sse.failed_events(str(exc), exc.kind))
        if stream == "responses":
            return _stream(sse.responses_events(result))
        if stream == "chat":
            return _stream(sse.chat_chunks(result))
        if stream == "messages":
            return _stream(messages_api.message_events(result))
        return result

    async def json_body(request: Request) -> dict | None:
        try:
            body = await request.json()
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await json_body(request)
        if body is None or not isinstance(body.get("messages"), list):
            return _invalid("'messages' must be a list")
        return await answer(request, lambda: server.chat(request, body), "chat" if body.get("stream") else None)

    @app.post("/v1/responses")
    async def responses(request: Request):
        body = await json_body(request)
        if body is None or "input" not in body:
            return _invalid("'input' is required")
        return await answer(
            request, lambda: server.responses(request, body), "responses" if body.get("stream") else None
        )

    @app.post("/v1/messages")
    async def messages(request: Request):
        body = await json_body(request)
        if body is None:
            return _invalid("the body must be a JSON object")

        async def work() -> dict:
            response = await server.responses(
                request, unreadable_as_value_error(messages_api.to_responses_request, body)
            )
            return messages_api.to_message(response, body.get("model") or server.config.model)

        return await answer(request, work, "messages" if body.get("stream") else None)

    return app


if __name__ == "__main__":
    run_server("responses_api_models", create_app)
