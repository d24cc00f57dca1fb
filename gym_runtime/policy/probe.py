"""Probe completions against each policy endpoint before ready: find what would fail every rollout.

A policy endpoint that answers ``/models`` (:mod:`gym_runtime.policy.endpoint`) can still
fail or corrupt every rollout of a kind, while a one-turn, tool-less probe passes. So, for every
endpoint of a model server instance configured like ``vllm_model`` (``base_url`` and ``model``),
one probe conversation (docs/rollouts.md, "The policy endpoint is checked for what it is"), each
request with ``logprobs`` / ``return_tokens_as_token_ids`` when the instance has
``return_token_id_information: true``:

* **the plain turn**: one short chat completion without tools (reasoning fields, ``<think>`` tags,
  token ids and ``/tokenize`` are checked on it);
* **the tool turn** (when the probe is about tools): one short chat completion offering one dummy
  tool;
* **turn 2** (``--probe-policy`` only): both answers sent back as the model server sends assistant
  messages (reasoning under the key(s) of ``reasoning_field``, a tool call with its tool result),
  then one more user message.

What fails the start (:class:`~gym_runtime.errors.StartError`):

=============================  ======================================================================
``GR-START-TOOL-PARSER``       a request with tools refused with vLLM's "``auto`` tool choice requires
                               --enable-auto-tool-choice and --tool-call-parser" (case C40)
``GR-START-TOKEN-IDS``         token ids asked for and not given: a logprob token that is not
                               ``token_id:<int>``, no logprobs, or ``/tokenize`` disagreeing with the
                               completion's prompt (case C44)
``GR-START-REASONING-FIELD``   a later turn refused for how it carried the reasoning back (case C42)
``GR-START-REASONING-PARSER``  reasoning fields while ``uses_reasoning_parser: false``
``GR-START-POLICY-PROBE``      any other failing probe completion (its whole error text in the message);
                               under ``--probe-policy`` only: a probe that runs by itself says such a
                               failure as a warning (the rollouts will show what it means)
=============================  ======================================================================

Model output is untrusted text: every completion's strings are made text first (a lone surrogate
from a split ``\\ud83d`` escape, NUL and control characters become U+FFFD, ``servers/_kit/text.py``)
before anything is sent back or shown; the probe's line says how many it replaced.

When it runs (:func:`plans`): with ``--probe-policy``, everything for every such instance;
otherwise no turn 2: the plain turn for instances with ``return_token_id_information: true``,
and the tool turn when the rows to run offer tools (``SuperviseOptions.probe_tools``, set by the
dry-run); never when ``--model-endpoint-timeout 0`` turned the endpoint checks off.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from gym_runtime.config.url_secrets import mask_url
from gym_runtime.errors import StartError
from servers._kit.text import repaired

PROBE_COMPLETION_TIMEOUT_S = 60.0
PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time.",
        "parameters": {"type": "object", "properties": {}},
    },
}
TOKEN_ID_RE = re.compile(r"token_id:[0-9]+", re.ASCII)
TOOL_CHOICE_RE = re.compile(r"enable-auto-tool-choice|tool-call-parser|auto\"? tool choice", re.I)
REASONING_KEYS = {
    "both": ("reasoning_content", "reasoning"),
    "reasoning": ("reasoning",),
    "reasoning_content": ("reasoning_content",),
}
MAX_SHOWN = 4000


@dataclass(frozen=True)
class Plan:
    """The probe of one endpoint of one model server instance: ``tools`` (offer the dummy tool),
    ``token_ids`` (ask for them and check them), ``two_turns``; the instance's ``parser``
    (``uses_reasoning_parser``, None when not set) and ``reasoning_field``."""

    instance: str
    url: str
    model: str
    api_key: str | None
    tools: bool
    token_ids: bool
    two_turns: bool
    parser: bool | None
    reasoning_field: str


def plans(instances: dict[str, Any], explicit: bool, tools: bool) -> list[Plan]:
    """The probes to run (module doc): ``explicit`` is ``--probe-policy``, ``tools`` whether the rows
    to run offer tools."""
    out = []
    for name, inst in instances.items():
        cfg = inst.config
        if inst.server_type != "responses_api_models" or "base_url" not in cfg or not cfg.get("model"):
            continue
        token_ids = bool(cfg.get("return_token_id_information"))
        if not (explicit or token_ids or tools):
            continue
        urls = cfg["base_url"] if isinstance(cfg["base_url"], list) else [cfg["base_url"]]
        parser = bool(cfg["uses_reasoning_parser"]) if "uses_reasoning_parser" in cfg else None
        field = cfg.get("reasoning_field") if cfg.get("reasoning_field") in REASONING_KEYS else "both"
        key = cfg.get("api_key") if isinstance(cfg.get("api_key"), str) else None
        out += [
            Plan(name, u.rstrip("/"), str(cfg["model"]), key, explicit or tools, token_ids, explicit, parser, field)
            for u in urls
            if isinstance(u, str)
        ]
    return out


def _shown(text: str) -> str:
    text = repaired(text)[0]  # upstream words end up in a message printed on a strict stream
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."


def words(response: httpx.Response) -> str:
    """What an error answer says: ``error.message`` or ``message`` when it has one, else its text."""
    try:
        body = response.json()
    except ValueError:
        return _shown(response.text)
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message") is not None:
        return _shown(str(error["message"]))
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return _shown(body["message"])
    return _shown(response.text)


class Inconclusive(Exception):
    """A probe that runs by itself (no ``--probe-policy``) failed for no reason it knows: said, not fatal."""


class Probe:
    """One :class:`Plan` run against its endpoint with ``client``; ``say`` receives progress lines."""

    def __init__(self, client: httpx.AsyncClient, plan: Plan, say: Callable[[str], None]) -> None:
        self.client, self.plan, self.say = client, plan, say
        self.headers = {"Authorization": f"Bearer {plan.api_key}"} if plan.api_key else {}
        self.found: list[str] = []

    def fail(self, code: str, message: str, hint: str) -> Exception:
        """The :class:`StartError` of a finding; an unexplained failure of a probe that runs by
        itself is :class:`Inconclusive` instead."""
        what = "--probe-policy" if self.plan.two_turns else "the start-up probe"
        if code == "GR-START-POLICY-PROBE" and not self.plan.two_turns:
            return Inconclusive(f"{what}: {message}")
        return StartError(f"{what}: {message}", code=code, hint=hint)

    def body(self, messages: list[dict], tools: bool) -> dict[str, Any]:
        """A probe request: the messages, the dummy tool (``tools``) and the token-id fields when planned."""
        body: dict[str, Any] = {"model": self.plan.model, "messages": messages, "max_tokens": 32, "temperature": 0}
        if tools:
            body["tools"] = [PROBE_TOOL]
        if self.plan.token_ids:
            body.update(logprobs=True, top_logprobs=0, return_tokens_as_token_ids=True)
        return body

    async def complete(self, body: dict, turn: str) -> dict:
        """POST ``body`` (``turn``: which, for messages); the completion, or the :class:`StartError` its
        failure means."""
        url, p = f"{self.plan.url}/chat/completions", self.plan
        shown = mask_url(url)
        try:
            r = await self.client.post(url, json=body, headers=self.headers, timeout=PROBE_COMPLETION_TIMEOUT_S)
        except httpx.HTTPError as e:
            raise self.fail(
                "GR-START-POLICY-PROBE",
                f"the {turn} of the probe of '{p.instance}' at {shown} failed: {type(e).__name__}: {e}",
                "check the policy endpoint; drop --probe-policy to skip this check",
            ) from None
        if r.status_code >= 400:
            said = words(r)
            if r.status_code == 400 and body.get("tools") and TOOL_CHOICE_RE.search(said):
                raise self.fail(
                    "GR-START-TOOL-PARSER",
                    f"policy endpoint {mask_url(p.url)} refuses requests that offer tools "
                    f"(HTTP 400: {said}), so every rollout whose row offers tools would fail",
                    f"restart vLLM with --enable-auto-tool-choice --tool-call-parser <parser for "
                    f"{p.model}> (e.g. hermes for Qwen models); see docs/rollouts.md",
                )
            carried = [
                k for m in body["messages"] if m.get("role") == "assistant" for k in REASONING_KEYS["both"] if m.get(k)
            ]
            if carried and r.status_code in (400, 422) and "reasoning" in said.lower():
                others = " or ".join(f for f in ("both", "reasoning", "reasoning_content") if f != p.reasoning_field)
                raise self.fail(
                    "GR-START-REASONING-FIELD",
                    f"policy endpoint {mask_url(p.url)} refuses an assistant message "
                    f"that carries its reasoning under {' and '.join(map(repr, sorted(set(carried))))} "
                    f"(reasoning_field: {p.reasoning_field}; HTTP {r.status_code}: {said}), so every "
                    "multi-turn rollout would fail on its second model call",
                    f"set reasoning_field: {others} in the config of '{p.instance}' (the field the "
                    'endpoint returns); see docs/rollouts.md, "Reasoning"',
                )
            raise self.fail(
                "GR-START-POLICY-PROBE",
                f"the {turn} of the probe of '{p.instance}' at {shown} failed (HTTP {r.status_code}: {said})",
                "check the policy endpoint and model name; drop --probe-policy to skip this check",
            )
        try:
            completion, fixed = repaired(r.json())
            message = completion["choices"][0]["message"]
            assert isinstance(message, dict)
        except (ValueError, KeyError, IndexError, TypeError, AssertionError, RecursionError):
            raise self.fail(
                "GR-START-POLICY-PROBE",
                f"the {turn} of the probe of '{p.instance}' at {shown} answered "
                f"a body that is not a chat completion: {_shown(r.text)}",
                "point the model server at an OpenAI-compatible /v1 root",
            ) from None
        if fixed:
            self.found.append(
                f"{turn}: {fixed} code point(s) that are no text replaced by U+FFFD (counted as "
                "repaired_text in rollouts)"
            )
        return completion

    async def run(self) -> None:
        """The plain turn, the tool turn and turn 2 as planned, with their checks; raises
        :class:`StartError` (module doc)."""
        p = self.plan
        plain = [{"role": "user", "content": "Reply with the word OK."}]
        first = await self.complete(self.body(plain, tools=False), "plain turn")
        self.check_reasoning(first["choices"][0]["message"])
        if p.token_ids:
            await self.check_token_ids(first, self.body(plain, tools=False))
        history = plain + self.replayed(first["choices"][0]["message"])
        if p.tools:
            ask = [{"role": "user", "content": "What time is it? Use the get_time tool."}]
            answer = await self.complete(self.body(history + ask, tools=True), "tool turn")
            called = bool(answer["choices"][0]["message"].get("tool_calls"))
            self.found.append("a request with tools ok" + (" (the model called the tool)" if called else ""))
            if p.token_ids:
                self.check_token_spelling(answer)
            history += ask + self.replayed(answer["choices"][0]["message"])
        if p.two_turns:
            await self.complete(
                self.body(history + [{"role": "user", "content": "Thanks. Reply with OK again."}], tools=p.tools),
                "turn 2",
            )
            self.found.append(f"turn 2 with reasoning_field: {p.reasoning_field} ok")
        self.say(f"policy probe: {p.url} ({p.instance}): " + "; ".join(self.found))

    def check_reasoning(self, message: dict) -> None:
        """Reasoning fields while ``uses_reasoning_parser: false`` fail; ``<think>`` tags then warn."""
        p = self.plan
        if p.parser is None:
            return
        fields = [f for f in ("reasoning_content", "reasoning") if message.get(f)]
        content = c if isinstance(c := message.get("content"), str) else ""
        tags = "<think>" in content or "</think>" in content
        if fields and not p.parser:
            raise self.fail(
                "GR-START-REASONING-PARSER",
                f"policy endpoint {p.url} returns reasoning (field "
                f"{fields[0]!r}), but '{p.instance}' has uses_reasoning_parser: false, so every rollout "
                "would fail",
                f"set uses_reasoning_parser: true in the config of '{p.instance}' (or "
                'serve the model without a reasoning parser); see docs/rollouts.md, "Reasoning"',
            )
        if tags and not p.parser:
            self.say(
                f"WARNING: policy endpoint {p.url} answers with <think> tags in the content and '{p.instance}' "
                "has uses_reasoning_parser: false: the reasoning would reach the grader as part of the answer; "
                "set uses_reasoning_parser: true for a reasoning model (docs/rollouts.md)"
            )
        else:
            self.found.append(
                f"reasoning fields {fields or 'none'}, <think> tags {'yes' if tags else 'no'}; "
                f"uses_reasoning_parser: {str(p.parser).lower()} fits"
            )

    def replayed(self, message: dict) -> list[dict]:
        """The turn-1 answer as the model server sends it back: content, reasoning under the
        ``reasoning_field`` key(s) (with the parser on), tool calls and their results."""
        p = self.plan
        thought = message.get("reasoning_content") or message.get("reasoning")
        sent: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if thought and p.parser:
            sent.update(dict.fromkeys(REASONING_KEYS[p.reasoning_field], thought))
        calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict) and c.get("id")]
        if calls:
            sent["tool_calls"] = calls
        return [sent] + [
            {"role": "tool", "tool_call_id": c["id"], "content": json.dumps({"time": "12:00"})} for c in calls
        ]

    def token_hint(self) -> str:
        return (
            f"use an endpoint that returns token ids (vLLM's OpenAI server; SGLang 0.5 ignores "
            f"return_tokens_as_token_ids), or set return_token_id_information: false in '{self.plan.instance}' "
            "when no trainer needs them"
        )

    def check_token_spelling(self, completion: dict) -> list:
        """The logprob entries of ``completion``; :class:`StartError` unless each token is ``token_id:<int>``."""
        p, hint = self.plan, self.token_hint()
        choice = completion["choices"][0]
        entries = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
        if not isinstance(entries, list) or not entries:
            raise self.fail(
                "GR-START-TOKEN-IDS",
                f"policy endpoint {p.url} returned no per-token logprobs although "
                f"'{p.instance}' asks for token ids (return_token_id_information: true)",
                hint,
            )
        bad = next(
            (
                e.get("token") if isinstance(e, dict) else e
                for e in entries
                if not (isinstance(e, dict) and isinstance(e.get("token"), str) and TOKEN_ID_RE.fullmatch(e["token"]))
            ),
            None,
        )
        if bad is not None or any(not isinstance(e, dict) for e in entries):
            raise self.fail(
                "GR-START-TOKEN-IDS",
                f"policy endpoint {p.url} ignores return_tokens_as_token_ids: a "
                f"logprob token is {str(bad)[:60]!r}, not 'token_id:<int>' (SGLang? use an endpoint "
                "that returns token ids)",
                hint,
            )
        return entries

    async def check_token_ids(self, completion: dict, body: dict) -> None:
        """Every logprob token is ``token_id:<int>``; the endpoint's ``/tokenize`` (when it has one)
        gives as many prompt tokens as the completion's usage counts."""
        p, hint = self.plan, self.token_hint()
        entries = self.check_token_spelling(completion)
        said = f"token ids ok ({len(entries)} generated)"
        usage = u if isinstance(u := completion.get("usage"), dict) else {}
        tokenize = {k: body[k] for k in ("model", "messages", "tools") if k in body}
        try:
            r = await self.client.post(
                f"{p.url.removesuffix('/v1')}/tokenize",
                json=tokenize,
                headers=self.headers,
                timeout=PROBE_COMPLETION_TIMEOUT_S,
            )
        except httpx.HTTPError:
            r = None
        if r is None or r.status_code in (404, 405):
            self.found.append(said + "; the endpoint has no /tokenize to compare with")
            return
        try:
            answer = r.json() if r.status_code == 200 else None
        except ValueError:
            answer = None
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        ok = isinstance(tokens, list) and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens)
        n = len(tokens) if isinstance(tokens, list) else 0
        counted = usage.get("prompt_tokens")
        if not ok or (isinstance(counted, int) and counted != n):
            detail = (
                f"answered HTTP {r.status_code}: {_shown(r.text)}"
                if not ok
                else f"gives {n} tokens for the probe's prompt, while its completion counted {counted}"
            )
            raise self.fail(
                "GR-START-TOKEN-IDS",
                f"the /tokenize of policy endpoint {p.url} {detail}: prompt token "
                "ids taken from it would not be the ones the model saw",
                hint,
            )
        self.found.append(said + f"; /tokenize agrees on {n} prompt tokens")


async def run_probes(
    client: httpx.AsyncClient, instances: dict[str, Any], explicit: bool, tools: bool, say: Callable[[str], None]
) -> None:
    """Run every planned probe (:func:`plans`) in config order; raises the first :class:`StartError`
    (an :class:`Inconclusive` probe is said as a warning)."""
    for plan in plans(instances, explicit, tools):
        try:
            await Probe(client, plan, say).run()
        except Inconclusive as e:
            say(f"WARNING: {e}; starting anyway (--probe-policy makes this fatal; docs/rollouts.md)")
