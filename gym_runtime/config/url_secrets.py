"""Credentials carried inside a URL: ``user:password@`` (userinfo) and key-like query parameters.

A gateway that takes its credential in the URL (``http://alice:pw@host/v1``,
``https://host/v1?api_key=...``, a signed ``?sig=...``) makes the URL itself a secret. Any
``*base_url`` value of a config (a string, or each string of a list of replicas) that carries one
is treated as a secret like a secret-named key (:mod:`gym_runtime.config.secrets`): masked wherever
it is shown, with only the credential replaced (:func:`mask_url`, so the host stays readable), and
given only to the server instances whose config uses it.

URLs are taken apart with :func:`urllib.parse.urlsplit` and :func:`urllib.parse.parse_qsl`
(RFC 3986's grammar as the standard library reads it); a query parameter is key-like when its name
is a secret name (:func:`gym_runtime.config.redact.is_secret_key`: ``api_key``, ``access_token``,
``x-amz-credential``...) or one of the short names keys travel under (``key``, ``sig``,
``signature``, ``auth``, ...).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from gym_runtime.config.redact import MASK, is_secret_key

# Query parameter names that carry a key although the secret-name rule does not see one in them
# (Google APIs' `?key=`, Azure SAS `sig=`, AWS `X-Amz-Signature`, `?auth=` of Firebase-style gateways).
_SHORT_KEY_NAMES = frozenset({"key", "sig", "signature", "auth", "pass", "pwd", "sas"})


def is_key_param(name: str) -> bool:
    """True when a query parameter named ``name`` carries a credential."""
    n = name.strip().lower()
    return is_secret_key(n) or n in _SHORT_KEY_NAMES or n.endswith(("_key", "-key", "signature", "_sig"))


def url_credentials(value: Any) -> list[str]:
    """What credentials the URL string ``value`` carries, in the words a warning uses:
    ``["userinfo"]``, ``["query parameter 'api_key'"]``...; ``[]`` for anything else (not a
    string, no scheme and host, nothing secret)."""
    if not isinstance(value, str) or "://" not in value:
        return []
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return []
    found = ["userinfo"] if parts.username is not None or parts.password is not None else []
    found += [
        f"query parameter {name!r}" for name, _ in parse_qsl(parts.query, keep_blank_values=True) if is_key_param(name)
    ]
    return list(dict.fromkeys(found))


def mask_url(value: str) -> str:
    """``value`` with its userinfo replaced by ``****`` and the value of each key-like query
    parameter by ``****``; other URLs and other strings unchanged. A URL ``urlsplit`` cannot read
    is masked whole."""
    if not url_credentials(value):
        return value
    try:
        parts = urlsplit(value.strip())
        host = parts.hostname or ""
    except ValueError:
        return MASK
    netloc = host if ":" not in host else f"[{host}]"
    if parts.username is not None or parts.password is not None:
        netloc = f"{MASK}@{netloc}"
    try:
        if parts.port is not None:
            netloc += f":{parts.port}"
    except ValueError:
        return MASK
    query = "&".join(
        f"{quote(k, safe='')}={MASK if is_key_param(k) else quote(v, safe='')}"
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def mask_urls(value: Any) -> Any:
    """:func:`mask_url` over a string or a list of them (a replica list); anything else unchanged."""
    if isinstance(value, list):
        return [mask_url(v) if isinstance(v, str) else v for v in value]
    return mask_url(value) if isinstance(value, str) else value


def is_base_url_key(path: tuple[str | int, ...]) -> bool:
    """True for a leaf under a key named ``*base_url`` (``base_url``, ``policy_base_url``,
    ``judge_base_url``), also an item of such a list."""
    keys = [k for k in path if isinstance(k, str)]
    return bool(keys) and keys[-1].lower().endswith("base_url")
