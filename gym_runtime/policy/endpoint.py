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

What a completion from the endpoint must look like (tools, token ids, reasoning, a second turn)
is probed after that, by :mod:`gym_runtime.policy.probe`.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import httpx

from gym_runtime.config.url_secrets import mask_url

PROBE_TIMEOUT_S = 2.0  # one probe's bound, here and in every readiness probe (seconds)
ENDPOINT_PATHS = ("/chat/completions", "/completions", "/responses", "/models", "/embeddings")


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


async def model_list(
    client: httpx.AsyncClient, base_url: str, api_key: str | None
) -> tuple[int | None, list[str] | None]:
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
        why = f"it ends in the endpoint path {path}" if path else f"GET {mask_url(base)}/models {_said(status, ids)}"
        return ("not-root", suggestion, f"{why}; GET {suggestion}/models {_said(s_status, s_ids)}")
    if ids is not None and name is not None and name not in ids:
        return ("wrong-model", name, ids)
    return "ready"
