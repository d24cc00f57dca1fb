"""Runtime settings: pins and their origins (bug: the default openai pin was the runtime's own
openai, which nemo-gym 0.4.0's ``openai<=2.7.2`` rejects, so `vendor` failed by default)."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet

from gym_runtime.errors import SettingsError
from gym_runtime.settings import load_settings


def test_default_pins_are_coherent_with_the_default_nemo_gym_pin() -> None:
    s = load_settings({"HOME": "/tmp"})
    assert s.pins["nemo-gym"] == "0.4.0"
    assert s.pins["openai"] in SpecifierSet("<=2.7.2")  # nemo-gym 0.4.0's own requirement
    assert "default" in s.pin_origins["openai"]


def test_pin_set_in_the_environment_is_attributed_to_its_variable() -> None:
    s = load_settings({"HOME": "/tmp", "GYM_RUNTIME_PIN_OPENAI": "2.44.0"})
    assert s.pins["openai"] == "2.44.0"
    assert s.pin_origins["openai"] == "set by GYM_RUNTIME_PIN_OPENAI"


def test_bad_pin_mode_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="GYM_RUNTIME_PIN_MODE='both'"):
        load_settings({"HOME": "/tmp", "GYM_RUNTIME_PIN_MODE": "both"})
