"""Secrets are masked in every dump, and the masked keys are listed (docs/architecture.md §4)."""

from __future__ import annotations

import pytest

from gym_runtime.config.redact import MASK, is_secret_key, redact


@pytest.mark.parametrize("key", ["api_key", "openai_api_key", "policy_api_key", "apiKey", "hf_token", "token",
                                 "access_token", "password", "db_password", "client_secret", "SECRET", "Authorization"])
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["return_token_id_information", "max_tokens", "max_output_tokens", "tokenizer",
                                 "base_url", "model", "num_tokens", "keyword", "monkey"])
def test_not_secret_keys(key: str) -> None:
    assert not is_secret_key(key)


def test_redact_lists_masked_paths_and_keeps_structure() -> None:
    data = {"policy_api_key": "sk-1", "policy_model": {"responses_api_models": {"m": {
        "api_key": "sk-2", "return_token_id_information": True, "base_url": "http://x", "empty_token": "",
        "unset_password": None, "keyless_api_key": "EMPTY", "lower_api_key": "empty", "padded_api_key": "EMPTY "}}},
        "api_keys": ["k1", "k2"], "secrets": {"openai": "sk-3", "n": 5}, "token_flag": False}
    masked: list[str] = []
    out = redact(data, masked=masked)
    inner = out["policy_model"]["responses_api_models"]["m"]
    assert out["policy_api_key"] == MASK and inner["api_key"] == MASK
    assert inner["return_token_id_information"] is True and inner["base_url"] == "http://x"
    assert inner["empty_token"] == "" and inner["unset_password"] is None
    # the keyless convention holds no key and is shown; anything else that merely looks like it is masked
    assert inner["keyless_api_key"] == "EMPTY" and inner["lower_api_key"] == inner["padded_api_key"] == MASK
    assert out["api_keys"] == [MASK, MASK] and out["secrets"] == {"openai": MASK, "n": MASK}
    assert out["token_flag"] is False
    assert masked == ["policy_api_key", "policy_model.responses_api_models.m.api_key",
                      "policy_model.responses_api_models.m.lower_api_key",
                      "policy_model.responses_api_models.m.padded_api_key", "api_keys[0]", "api_keys[1]",
                      "secrets.openai", "secrets.n"]
    assert "sk-" not in repr(out) and data["policy_api_key"] == "sk-1"
