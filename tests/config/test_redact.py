"""Which config keys are secret, and which of their values are masked (docs/architecture.md §4)."""

from __future__ import annotations

import pytest

from gym_runtime.config.redact import holds_a_secret, is_secret_key


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "openai_api_key",
        "policy_api_key",
        "apiKey",
        "hf_token",
        "token",
        "access_token",
        "password",
        "db_password",
        "client_secret",
        "SECRET",
        "Authorization",
    ],
)
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "return_token_id_information",
        "max_tokens",
        "max_output_tokens",
        "tokenizer",
        "base_url",
        "model",
        "num_tokens",
        "keyword",
        "monkey",
        "control_auth_token_env",  # names the variable holding the token (Gym 0.7's token_id_capture)
        "api_key_env",
    ],
)
def test_not_secret_keys(key: str) -> None:
    assert not is_secret_key(key)


@pytest.mark.parametrize("value", ["sk-1", "empty", "EMPTY ", 0, 5, 1.5])
def test_a_secret_named_value_that_may_be_a_key_is_masked(value: object) -> None:
    assert holds_a_secret(value)


@pytest.mark.parametrize("value", [None, "", True, False, "EMPTY", {"a": "sk"}, ["sk"]])
def test_values_that_hold_no_key_are_shown(value: object) -> None:
    """Unset, a switch, the keyless ``EMPTY`` convention; containers are never leaves (their
    leaves are judged one by one, tests/config/test_secrets.py)."""
    assert not holds_a_secret(value)
