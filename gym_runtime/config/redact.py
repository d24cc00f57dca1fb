"""The secret-name rule, and which secret-named values are masked.

A key is secret when its name contains ``api_key``, ``apikey``, ``token``, ``password``,
``passwd``, ``secret``, ``authorization`` or ``credential`` (any case), except names that merely
mention tokens, such as Gym's ``return_token_id_information`` or ``max_tokens`` (Gym 0.4.0's own
``hide_secrets`` masks those too; we do not), names ending in ``_env``, whose value names the
environment variable that holds a secret rather than the secret (Gym 0.7's
``token_id_capture.control_auth_token_env``: a server reads its token from the variable the value
names, so a masked name is a server that cannot start), and ``secret_keys``, the top-level list of extra
secret names a package may give (:mod:`gym_runtime.config.secrets`, which also follows secrets
through interpolations, decides which server receives which, and masks: ``SecretMap.view``).
"""

from __future__ import annotations

import re
from typing import Any

MASK = "****"
# What OpenAI clients send to an endpoint that takes no key (vLLM started without --api-key): the value
# a job's policy_api_key gets when none is given (merge.PolicyValues.keyless_defaults). No secret.
KEYLESS_API_KEY = "EMPTY"
_SECRET = re.compile(r"(api_?key|token|password|passwd|secret|authorization|credential)", re.I)
_NOT_SECRET = re.compile(
    r"(token_id|token_ids|max_tokens|_tokens$|tokenizer|num_tokens|token_count|tokens_|_env$|^secret_keys$)", re.I
)


def is_secret_key(key: str) -> bool:
    """True when a config key's value must never be shown."""
    return bool(_SECRET.search(key)) and not _NOT_SECRET.search(key)


def holds_a_secret(value: Any) -> bool:
    """True when a secret-named leaf value must be masked: any value except those that hold no key
    and say so when shown: ``None`` and ``""`` (unset), booleans (a switch) and exactly
    :data:`KEYLESS_API_KEY` (no key given: the keyless convention). Containers are never leaves."""
    return not isinstance(value, (dict, list, bool)) and value not in (None, "", KEYLESS_API_KEY)
