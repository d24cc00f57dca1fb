"""What a policy endpoint's answers mean beyond their shape: interrupted completions, token ids,
and the refusals that name a setting (docs/rollouts.md, "The model server keeps vLLM's meaning").

* **Finish reasons** (:func:`interrupted`): a completion ends ``stop``, ``length``, ``tool_calls``,
  ``content_filter`` or ``function_call`` (OpenAI's set; vLLM's OpenAI server uses the first
  three). ``abort`` (vLLM and SGLang abort requests in flight when a trainer pauses the engine or
  refits its weights, case C43) and any other value mean the answer was cut off by the engine, not
  finished by the model: it is asked again, never scored. A missing ``finish_reason`` counts as
  finished, as Gym's converters take it.
* **Token ids** (:func:`token_ids`): with ``return_tokens_as_token_ids`` vLLM spells every logprob
  token ``token_id:<int>``. An endpoint that ignores the flag (SGLang 0.5 sends the decoded text,
  case C44) sends tokens such as ``"The"`` or ``" 42"``; Gym 0.4.0 parses ``int(token.removeprefix(
  "token_id:"))``, which fails on the first and silently turns the second into id 42. Here a token
  must match ``token_id:[0-9]+`` exactly, else :class:`TokenIdsError`.
* **Refusals that name a setting** (:func:`explain`): vLLM started without
  ``--enable-auto-tool-choice --tool-call-parser`` answers every request that offers tools with
  400 ``"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set``
  (case C40); a frontend that treats ``reasoning`` and ``reasoning_content`` as one field answers
  400 ``duplicate field 'reasoning'`` when an assistant message carries both (case C42, Gym 0.7.0's
  ``reasoning_field``).
"""

from __future__ import annotations

import math
import re
from typing import Any

FINISHED = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
TOKEN_ID_RE = re.compile(r"token_id:([0-9]+)", re.ASCII)
REASONING_FIELDS = ("reasoning", "reasoning_content")
TOOL_CHOICE_FLAGS = "--enable-auto-tool-choice --tool-call-parser"
_TOOL_CHOICE_RE = re.compile(r"enable-auto-tool-choice|tool-call-parser|auto\"? tool choice", re.I)


class TokenIdsError(ValueError):
    """The endpoint's answer has no usable token ids; the message says what it sent instead."""


def finish_reason(completion: Any) -> Any:
    """The first choice's ``finish_reason`` (None when absent)."""
    choices = completion.get("choices") if isinstance(completion, dict) else None
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    return first.get("finish_reason")


def interrupted(completion: Any) -> str | None:
    """The finish reason of a completion the engine cut off (``abort`` or any reason not in
    :data:`FINISHED`), else None (finished, or no reason given)."""
    reason = finish_reason(completion)
    if reason is None or reason in FINISHED:
        return None
    return str(reason)[:80]


def token_ids(entries: Any) -> tuple[list[int], list[float]]:
    """``(generation token ids, their logprobs)`` of ``choices[0].logprobs.content``.

    Raises :class:`TokenIdsError` when ``entries`` is not a list (no logprobs came back), when a
    token is not ``token_id:<int>`` (the endpoint ignores ``return_tokens_as_token_ids``) or a
    logprob is not a number."""
    if not isinstance(entries, list):
        raise TokenIdsError(
            "returned no per-token logprobs although logprobs were requested "
            "(return_token_id_information: true); an endpoint with a reasoning or tool parser "
            "that drops logprobs (SGLang 0.5) cannot give training token ids"
        )
    ids, logprobs = [], []
    for i, entry in enumerate(entries):
        token = entry.get("token") if isinstance(entry, dict) else None
        match = TOKEN_ID_RE.fullmatch(token) if isinstance(token, str) else None
        if match is None:
            shown = repr(token) if len(repr(token)) <= 60 else repr(token)[:60] + "..."
            raise TokenIdsError(
                f"ignores return_tokens_as_token_ids: logprobs.content[{i}].token is {shown}, not "
                "'token_id:<int>' (SGLang? use an endpoint that returns token ids, such as vLLM)"
            )
        logprob = entry.get("logprob")
        if isinstance(logprob, bool) or not isinstance(logprob, (int, float)) or math.isnan(logprob):
            raise TokenIdsError(f"logprobs.content[{i}].logprob is {logprob!r}, not a number")
        ids.append(int(match.group(1)))
        logprobs.append(float(logprob))
    return ids, logprobs


def prompt_ids(tokens: Any, where: str) -> list[int]:
    """``tokens`` when it is a list of non-negative ints (``/tokenize``'s ``tokens``, vLLM's
    ``prompt_token_ids``), else :class:`TokenIdsError` naming ``where`` it came from."""
    if isinstance(tokens, list) and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens):
        return tokens
    raise TokenIdsError(f"{where} is not a list of token ids (got {type(tokens).__name__})")


def carried_reasoning(body: dict) -> list[str]:
    """The reasoning keys the assistant messages of a chat request carry (sorted, deduplicated)."""
    keys = {
        k
        for m in body.get("messages") or []
        if isinstance(m, dict) and m.get("role") == "assistant"
        for k in REASONING_FIELDS
        if m.get(k)
    }
    return sorted(keys)


def explain(
    status: int | None, words: str, body: dict, instance: str, setting: str, model: str
) -> tuple[str, str] | None:
    """``(error kind, advice)`` for an upstream refusal that a setting explains, else None.

    ``words`` is what the endpoint said, ``body`` the chat request it refused, ``setting`` the
    instance's ``reasoning_field``. Kinds: ``tool_parser_missing`` (a request with tools refused
    for want of vLLM's tool flags) and ``reasoning_field_rejected`` (a 400/422 about reasoning for
    a request whose assistant messages carry reasoning)."""
    if status == 400 and body.get("tools") and _TOOL_CHOICE_RE.search(words):
        return "tool_parser_missing", (
            f"the endpoint serves requests with tools only when vLLM runs with "
            f"{TOOL_CHOICE_FLAGS} <parser for {model}>: restart it with both flags "
            "(e.g. --tool-call-parser hermes for Qwen models)"
        )
    carried = carried_reasoning(body)
    if status in (400, 422) and carried and "reasoning" in words.lower():
        others = [f for f in ("both", *REASONING_FIELDS) if f != setting]
        return "reasoning_field_rejected", (
            f"the request's assistant messages carry their reasoning under "
            f"{' and '.join(map(repr, carried))} (reasoning_field: {setting}): set "
            f"reasoning_field: {' or '.join(others)} in the config of '{instance}' "
            "(the field the endpoint itself returns)"
        )
    return None
