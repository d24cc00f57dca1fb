"""The secret-name rule, and masking by key name.

A key is secret when its name contains ``api_key``, ``apikey``, ``token``, ``password``,
``passwd``, ``secret``, ``authorization`` or ``credential`` (any case), except names that merely
mention tokens, such as Gym's ``return_token_id_information`` or ``max_tokens`` (Gym 0.4.0's own
``hide_secrets`` masks those too; we do not), and ``secret_keys``, the top-level list of extra
secret names a package may give (:mod:`gym_runtime.config.secrets`, which also follows secrets
through interpolations and decides which server receives which).
"""

from __future__ import annotations

import re
from typing import Any

MASK = "****"
# What OpenAI clients send to an endpoint that takes no key (vLLM started without --api-key): the value
# a job's policy_api_key gets when none is given (merge.PolicyValues.keyless_defaults). No secret.
KEYLESS_API_KEY = "EMPTY"
_SECRET = re.compile(r"(api_?key|token|password|passwd|secret|authorization|credential)", re.I)
_NOT_SECRET = re.compile(r"(token_id|token_ids|max_tokens|_tokens$|tokenizer|num_tokens|token_count|tokens_|^secret_keys$)",
                         re.I)


def is_secret_key(key: str) -> bool:
    """True when a config key's value must never be shown."""
    return bool(_SECRET.search(key)) and not _NOT_SECRET.search(key)


def holds_a_secret(value: Any) -> bool:
    """True when a secret-named leaf value must be masked: any value except those that hold no key
    and say so when shown: ``None`` and ``""`` (unset), booleans (a switch) and exactly
    :data:`KEYLESS_API_KEY` (no key given: the keyless convention). Containers are never leaves."""
    return not isinstance(value, (dict, list, bool)) and value not in (None, "", KEYLESS_API_KEY)


def redact(node: Any, path: str = "", masked: list[str] | None = None, secret: bool = False) -> Any:
    """A deep copy of ``node`` with secret values replaced by ``****``.

    A value is secret when its own key or any enclosing key is secret (``api_keys: [a, b]``,
    ``secrets: {openai: ...}``). ``masked`` (when given) receives the dotted key path of every
    masked value. Values that hold no key (:func:`holds_a_secret`: empty, ``None``, booleans,
    ``EMPTY``) are left as they are: nothing to hide, and it shows they are unset or switched.
    """
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            p = f"{path}.{k}" if path else str(k)
            out[k] = redact(v, p, masked, secret or is_secret_key(str(k)))
        return out
    if isinstance(node, list):
        return [redact(v, f"{path}[{i}]", masked, secret) for i, v in enumerate(node)]
    if secret and holds_a_secret(node):
        if masked is not None:
            masked.append(path)
        return MASK
    return node
