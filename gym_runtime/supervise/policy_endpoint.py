"""Is a policy model base URL what it claims to be: an OpenAI API root serving the policy model?

The built-in ``vllm_model`` posts to ``{base_url}/chat/completions``, so ``base_url`` must be the
root those routes hang under (``http://host:8000/v1`` for vLLM). NeMo Gym 0.4.0
(``nemo_gym/server_utils.py``, ``wait_for_model_endpoints``) probes ``{base}/models`` only for a
base ending in ``/v1`` and counts any HTTP answer as ready, so ``http://host:8000`` or
``.../v1/chat/completions`` are reported ready and every rollout then 404s (case C35). Here,
once the endpoint answers at all (``readiness.wait_http``), :func:`check` decides:

- a base ending in an endpoint path (``/chat/completions``, ``/completions``, ``/responses``,
  ``/models``, ``/embeddings``) is never a root: ``("not-root", suggestion, detail)``;
- ``GET {base}/models`` (whatever the path, with the policy key): 401/403 -> ``("auth", status)``;
  an OpenAI model list -> the policy model name must be in it (``("wrong-model", name, served)``);
  anything else (404, HTML, another shape) on a base not ending in ``/v1`` ->
  ``("not-root", suggestion, detail)`` with the ``/v1`` root to try; on a ``/v1`` base -> ready
  (a server without ``/models`` still works, as in Gym).

:func:`probe_reasoning` (``--probe-policy``) sends one short chat completion to find the
"reasoning returned but ``uses_reasoning_parser: false``" mismatch before the first rollout.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from gym_runtime.supervise.readiness import PROBE_TIMEOUT_S

ENDPOINT_PATHS = ("/chat/completions", "/completions", "/responses", "/models", "/embeddings")
PROBE_COMPLETION_TIMEOUT_S = 60.0


def suggest_root(base_url: str) -> str:
    """The OpenAI ``/v1`` root a mistyped base URL most likely meant: the endpoint path cut off,
    then ``/v1`` added unless the rest already ends in it."""
    parts = urlsplit(base_url.rstrip("/"))
    path = parts.path.rstrip("/")
    for suffix in ENDPOINT_PATHS:
        if path.endswith(suffix):
            path = path[: -len(suffix)].rstrip("/")
            break
    if not path.endswith("/v1"):
        path += "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def endpoint_path(base_url: str) -> str | None:
    """The endpoint path a base URL ends in (``/chat/completions``...), else None."""
    path = urlsplit(base_url.rstrip("/")).path.rstrip("/")
    return next((s for s in ENDPOINT_PATHS if path.endswith(s)), None)


async def model_list(client: httpx.AsyncClient, base_url: str, api_key: str | None) -> tuple[int | None, list[str] | None]:
    """``(status, ids)`` of ``GET {base}/models``: the status (None when nothing answered) and the
    model ids when the answer is an OpenAI model list (``{"data": [{"id": ...}]}``), else None."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = await client.get(base_url.rstrip("/") + "/models", headers=headers, timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError:
        return None, None
    try:
        body = r.json() if r.status_code == 200 else None
    except ValueError:
        return r.status_code, None
    items = body.get("data") if isinstance(body, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(i.get("id"), str) for i in items):
        return r.status_code, None
    return r.status_code, [i["id"] for i in items]


def _said(status: int | None, ids: list[str] | None) -> str:
    if status is None:
        return "did not answer"
    if ids is not None:
        return "lists " + (", ".join(map(repr, ids)) or "no model")
    return f"answered HTTP {status}, not a model list"


async def check(client: httpx.AsyncClient, base_url: str, model: tuple[str, str | None] | None) -> str | tuple:
    """The readiness outcome of an endpoint that answers: ``"ready"``, ``("auth", status)``,
    ``("wrong-model", name, served)`` or ``("not-root", suggestion, detail)`` (module doc).
    ``model`` is ``(policy model name, api key)`` when the job gave a model name."""
    name, key = model if model else (None, None)
    base = base_url.rstrip("/")
    status, ids = await model_list(client, base, key)
    if status in (401, 403):  # without the job's key (no policy model name) there is nothing to judge
        return ("auth", status) if model else "ready"
    suggestion = suggest_root(base)
    path = endpoint_path(base)
    if path is not None or (ids is None and not urlsplit(base).path.rstrip("/").endswith("/v1")):
        s_status, s_ids = (await model_list(client, suggestion, key)) if suggestion != base else (status, ids)
        why = f"it ends in the endpoint path {path}" if path else f"GET {base}/models {_said(status, ids)}"
        return ("not-root", suggestion, f"{why}; GET {suggestion}/models {_said(s_status, s_ids)}")
    if ids is not None and name is not None and name not in ids:
        return ("wrong-model", name, ids)
    return "ready"


def reasoning_fields(message: dict[str, Any]) -> list[str]:
    """The reasoning fields a chat completion message carries (vLLM: ``reasoning_content``, and
    ``reasoning`` from v0.10 on)."""
    return [f for f in ("reasoning_content", "reasoning") if message.get(f)]


async def probe_reasoning(client: httpx.AsyncClient, base_url: str, model: str, api_key: str | None
                          ) -> tuple[list[str], bool]:
    """One short chat completion: ``(reasoning fields in the answer, think tags in its content)``.
    Raises ``httpx.HTTPError`` when the endpoint fails or answers an error status."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"model": model, "messages": [{"role": "user", "content": "Reply with the word OK."}], "max_tokens": 32}
    r = await client.post(base_url.rstrip("/") + "/chat/completions", json=body, headers=headers,
                          timeout=PROBE_COMPLETION_TIMEOUT_S)
    r.raise_for_status()
    message = ((r.json().get("choices") or [{}])[0] or {}).get("message") or {}
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    return reasoning_fields(message), "<think>" in content or "</think>" in content


async def check_reasoning(client: httpx.AsyncClient, instances: dict[str, Any], say) -> None:
    """``--probe-policy``: one completion per base URL of every model server instance that sets
    ``uses_reasoning_parser``. Reasoning fields with the parser off fail the start (every rollout
    would fail), ``<think>`` tags in the content with it off are said as a warning (they would reach
    the grader), a failing completion fails the start. Raises :class:`StartError`
    (``GR-START-REASONING-PARSER``, ``GR-START-POLICY-PROBE``)."""
    from gym_runtime.errors import StartError

    for name, inst in instances.items():
        cfg = inst.config
        if inst.server_type != "responses_api_models" or "uses_reasoning_parser" not in cfg:
            continue
        parser = bool(cfg["uses_reasoning_parser"])
        urls = cfg.get("base_url") if isinstance(cfg.get("base_url"), list) else [cfg.get("base_url")]
        for url in [u for u in urls if isinstance(u, str)]:
            try:
                fields, tags = await probe_reasoning(client, url, str(cfg.get("model")), cfg.get("api_key"))
            except httpx.HTTPError as e:
                detail = f"HTTP {e.response.status_code}: {e.response.text[:300]}" if isinstance(
                    e, httpx.HTTPStatusError) else f"{type(e).__name__}: {e}"
                raise StartError(f"--probe-policy: the probe completion of '{name}' at {url}/chat/completions "
                                 f"failed ({detail})", code="GR-START-POLICY-PROBE",
                                 hint="check the policy endpoint and model name; drop --probe-policy to skip "
                                 "this check") from None
            if fields and not parser:
                raise StartError(f"policy endpoint {url} returns reasoning (field {fields[0]!r}), but '{name}' has "
                                 "uses_reasoning_parser: false, so every rollout would fail",
                                 code="GR-START-REASONING-PARSER",
                                 hint=f"set uses_reasoning_parser: true in the config of '{name}' (or serve the "
                                 "model without a reasoning parser); see docs/rollouts.md, \"Reasoning\"")
            if tags and not parser:
                say(f"WARNING: policy endpoint {url} answers with <think> tags in the content and '{name}' has "
                    "uses_reasoning_parser: false: the reasoning would reach the grader as part of the answer; set "
                    "uses_reasoning_parser: true for a reasoning model (docs/rollouts.md)")
            else:
                say(f"--probe-policy: {url} ({name}): reasoning fields {fields or 'none'}, <think> tags "
                    f"{'yes' if tags else 'no'}; uses_reasoning_parser: {str(parser).lower()} fits")
