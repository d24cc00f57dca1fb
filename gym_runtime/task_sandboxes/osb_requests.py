"""What a server may ask the OpenSandbox gate for, in opensandbox-server 1.1.1's wire format
(:mod:`.osb_gate`; docs/runtime.md, "Task sandboxes on an OpenSandbox server"): the checks of a
create (:func:`checked_create`), the labels, TTL and network policy the gate puts on it
(:func:`labelled`), a list narrowed to the server's own sandboxes (:func:`list_query`), paths below a
sandbox (:func:`plain_path`), and the refusals (:class:`GateError`, OpenSandbox's error shape)."""

from __future__ import annotations

import json
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gym_runtime.task_sandboxes.approval import SETTING

KEY_HEADER = "open-sandbox-api-key"
TASK_LABEL = "gym-runtime-task-server"  # beside the run and owner labels (sandbox/opensandbox/spec.py)
MAX_BODY = 1 << 20  # a create, metadata or renewal body; proxied bodies (uploads) are streamed
HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    KEY_HEADER,
}
CREATE_FIELDS = {
    "image",
    "platform",
    "timeout",
    "resourceLimits",
    "resourceRequests",
    "env",
    "metadata",
    "entrypoint",
    "extensions",
    "networkPolicy",
    "lifecycle",
    "secureAccess",
}
REFUSED_FIELDS = {
    "volumes": "volumes (a host path or a volume claim would reach files outside the sandbox)",
    "snapshotId": "a snapshot instead of an image (no approved image to check)",
    "templateId": "a template instead of an image (no approved image to check)",
    "credentialProxy": "a credential proxy",
}
# the `extensions` a create may carry: the image pull policy NeMo Gym 0.7.0's provider sets, and
# renew-on-access; others are the operator's (e.g. `bootstrap.execd.isolation` grants CAP_SYS_ADMIN,
# `poolRef` takes a pool's image instead of the one asked for)
EXTENSIONS = {"imagePullPolicy", "opensandbox.extensions.image-pull-policy", "access.renew.extend.seconds"}
PASSED = {
    "renew-expiration": {"POST"},
    "pause": {"POST"},
    "resume": {"POST"},
    "metadata": {"PATCH"},
    "networkpolicy": {"GET"},
}


class GateError(Exception):
    """A refusal: ``code`` (``GR-*``), HTTP ``status``, ``message`` and ``hint``."""

    def __init__(self, code: str, message: str, status: int, hint: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.status, self.hint = code, message, status, hint

    def response(self) -> JSONResponse:
        text = f"[{self.code}] {self.message}" + (f" (hint: {self.hint})" if self.hint else "")
        return JSONResponse({"code": self.code, "message": text}, status_code=self.status)


def checked_create(spec: dict[str, Any], owner: str, approved: Any, url: str) -> str:
    """The image of create request ``spec`` from server ``owner``, once every field is one the gate
    passes on and the image is approved (``approved``: :class:`.approval.ApprovedImages`; ``url``:
    the OpenSandbox server, for the message). Raises :class:`GateError`: ``GR-SANDBOX-TASK-SPEC``
    (400) for a refused or unknown field or an extension not in :data:`EXTENSIONS`,
    ``GR-SANDBOX-TASK-IMAGE-DENIED`` (403) for an image (or none) the operator did not approve."""
    for key in spec:
        if key in REFUSED_FIELDS:
            raise GateError(
                "GR-SANDBOX-TASK-SPEC",
                f"server {owner!r} asked for {REFUSED_FIELDS[key]} (`{key}`), which gym-runtime does not pass on",
                400,
            )
        if key not in CREATE_FIELDS:
            raise GateError("GR-SANDBOX-TASK-SPEC", f"server {owner!r} sent the unknown create field `{key}`", 400)
    extensions = spec.get("extensions") or {}
    bad = sorted(str(k) for k in extensions if k not in EXTENSIONS) if isinstance(extensions, dict) else ["(not a map)"]
    if bad:
        raise GateError(
            "GR-SANDBOX-TASK-SPEC",
            f"server {owner!r} asked for the extensions {', '.join(bad)}, which "
            f"gym-runtime does not pass on (only {', '.join(sorted(EXTENSIONS))})",
            400,
        )
    image = spec["image"].get("uri") if isinstance(spec.get("image"), dict) else None
    if not isinstance(image, str) or not approved.approves(image):  # approves() refuses a non-string too
        raise GateError(
            "GR-SANDBOX-TASK-IMAGE-DENIED",
            f"server {owner!r} asked for a task sandbox of image "
            f"{image!r} on the OpenSandbox server {url}, which {SETTING} does not approve",
            403,
            hint=f"the operator adds the image, or a prefix of it ending in '/', to {SETTING} "
            f"(now: {approved.describe()})",
        )
    return image


def labelled(spec: dict[str, Any], labels: Any, owner: str, policy_wire: dict[str, Any] | None) -> bool:
    """Put the run's labels and ``owner``'s on create request ``spec`` (in place; the server's own
    ``gym-runtime-*`` keys dropped), the operator's ``networkPolicy`` (``policy_wire``; none when
    egress is unenforced) in place of any the server sent, and the run's TTL when it asked for no
    ``timeout``. Returns whether the gate must renew that TTL. ``labels``:
    :class:`sandbox.opensandbox.spec.RunLabels`."""
    from sandbox.opensandbox.spec import LABEL_OWNER, LABEL_RUN, LABEL_SERVER, TTL_S

    meta = m if isinstance(m := spec.get("metadata"), dict) else {}
    meta = {str(k): str(v) for k, v in meta.items() if not str(k).startswith("gym-runtime-")}
    spec["metadata"] = {
        **meta,
        LABEL_RUN: labels.run,
        LABEL_OWNER: labels.owner,
        TASK_LABEL: labels.metadata(owner)[LABEL_SERVER],
    }
    renew = spec.get("timeout") is None
    if renew:  # "manual cleanup" becomes the run's TTL, renewed while the run lives
        spec["timeout"] = TTL_S
    if policy_wire is not None:
        spec["networkPolicy"] = policy_wire
    else:
        spec.pop("networkPolicy", None)
    return renew


def list_query(query: Any, labels: Any, owner: str) -> list[tuple[str, str]]:
    """The query of a list request (``query``: Starlette's ``QueryParams``) narrowed to ``owner``'s
    sandboxes of this run: its ``metadata`` filter keeps the server's own terms (not ``gym-runtime-*``)
    and gets the run's and the server's labels."""
    from sandbox.opensandbox.spec import LABEL_RUN, LABEL_SERVER

    pairs = [(k, v) for k, v in query.multi_items() if k != "metadata"]
    asked = [kv for m in query.getlist("metadata") for kv in m.split("&") if kv]
    asked = [kv for kv in asked if not kv.split("=", 1)[0].startswith("gym-runtime-")]
    name = labels.metadata(owner)[LABEL_SERVER]
    pairs.append(("metadata", "&".join([*asked, f"{LABEL_RUN}={labels.run}", f"{TASK_LABEL}={name}"])))
    return pairs


def plain_path(rest: str, owner: str) -> None:
    """Refuse a path below a sandbox that could leave it once the client or the server normalises
    it (``..`` or ``.`` segments, also percent-encoded, which arrive decoded here; an empty
    segment but the last; ``?``, ``#``, ``\\`` or a control character): ``GR-SANDBOX-TASK-SPEC``."""
    parts = rest.split("/")
    if (
        any(p in (".", "..") or any(c in p for c in "?#\\") or any(ord(c) < 32 for c in p) for p in parts)
        or "" in parts[:-1]
    ):
        raise GateError(
            "GR-SANDBOX-TASK-SPEC",
            f"server {owner!r} asked for a path below its sandbox that is not plain: {rest[:200]!r}",
            400,
        )


def forwarded(request: Request) -> dict[str, str]:
    """The request's headers without hop-by-hop ones and without the server's token."""
    return {k: v for k, v in request.headers.items() if k.lower() not in HOP}


async def read_body(request: Request) -> bytes:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise GateError("GR-SANDBOX-TASK-SPEC", f"a request body over {MAX_BODY} bytes", 413)
    return body


def json_object(body: bytes, owner: str) -> dict[str, Any]:
    try:
        value = json.loads(body or b"{}")
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise GateError("GR-SANDBOX-TASK-SPEC", f"server {owner!r} sent a body that is not a JSON object", 400)
    return value


def plain(answer: httpx.Response) -> Response:
    """``answer`` (read whole) as the gate's response, hop-by-hop headers dropped."""
    headers = {k: v for k, v in answer.headers.items() if k.lower() not in HOP | {"content-encoding"}}
    return Response(answer.content, status_code=answer.status_code, headers=headers)
