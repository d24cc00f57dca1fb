"""Runtime settings: pins and their origins (bug: the default openai pin was the runtime's own
openai, which nemo-gym 0.4.0's ``openai<=2.7.2`` rejects, so `vendor` failed by default)."""

from __future__ import annotations

import os

import pytest
from packaging.specifiers import SpecifierSet

from gym_runtime.errors import SettingsError
from gym_runtime.settings import load_settings


def test_default_pins_are_the_current_gym_release_and_the_openai_it_requires() -> None:
    s = load_settings({"HOME": "/tmp"})
    assert s.pins["nemo-gym"] == "0.7.0"
    assert s.pins["openai"] in SpecifierSet("==2.44.0")  # nemo-gym 0.7.0's own requirement
    assert "default" in s.pin_origins["openai"] and not s.pin_explicit("openai")


def test_an_older_sdk_pin_brings_the_openai_that_release_accepts() -> None:
    s = load_settings({"HOME": "/tmp", "GYM_RUNTIME_PIN_NEMO_GYM": "0.4.0"})
    assert s.pins["openai"] in SpecifierSet("<=2.7.2")  # nemo-gym 0.4.0's own requirement (case C07)
    assert s.pin_explicit("nemo-gym") and "0.4.0" in s.pin_origins["openai"]


def test_pin_set_in_the_environment_is_attributed_to_its_variable() -> None:
    s = load_settings({"HOME": "/tmp", "GYM_RUNTIME_PIN_OPENAI": "2.44.0"})
    assert s.pins["openai"] == "2.44.0"
    assert s.pin_origins["openai"] == "set by GYM_RUNTIME_PIN_OPENAI"


def test_bad_pin_mode_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="GYM_RUNTIME_PIN_MODE='both'"):
        load_settings({"HOME": "/tmp", "GYM_RUNTIME_PIN_MODE": "both"})


def test_server_limits_default_to_half_the_memory_and_4096_processes() -> None:
    s = load_settings({"HOME": "/tmp"})
    total_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    assert s.server_memory_mb == total_mb // 2 and s.server_pids == 4096


@pytest.mark.parametrize(("value", "want"), [("512", 512), ("0", None), ("", 4096)])
def test_server_limits_are_set_or_switched_off(value: str, want: int | None) -> None:
    s = load_settings({"HOME": "/tmp", "GYM_RUNTIME_SERVER_PIDS": value, "GYM_RUNTIME_SERVER_MEMORY_MB": value})
    assert s.server_pids == want
    if value:
        assert s.server_memory_mb == want


@pytest.mark.parametrize("value", ["-1", "1.5", "lots"])
def test_bad_server_limit_names_the_variable(value: str) -> None:
    with pytest.raises(SettingsError, match=f"GYM_RUNTIME_SERVER_MEMORY_MB='{value}'") as e:
        load_settings({"HOME": "/tmp", "GYM_RUNTIME_SERVER_MEMORY_MB": value})
    assert "0 for no limit" in e.value.hint


def test_vendor_platform_is_unset_by_default_and_read_when_set() -> None:
    assert load_settings({"HOME": "/tmp"}).vendor_platform is None
    assert (
        load_settings({"HOME": "/tmp", "GYM_RUNTIME_VENDOR_PLATFORM": "linux/arm64"}).vendor_platform == "linux/arm64"
    )


def test_bad_vendor_platform_names_the_variable_and_the_choices() -> None:
    with pytest.raises(
        SettingsError, match="GYM_RUNTIME_VENDOR_PLATFORM='linux/aarch64' is not one of linux/amd64, linux/arm64"
    ):
        load_settings({"HOME": "/tmp", "GYM_RUNTIME_VENDOR_PLATFORM": "linux/aarch64"})


def test_server_env_is_a_comma_list_of_names_and_instance_names() -> None:
    s = load_settings(
        {"HOME": "/tmp", "GYM_RUNTIME_SERVER_ENV": " OPENROUTER_API_KEY, my_judge:JUDGE_TOKEN ,OPENROUTER_API_KEY"}
    )
    assert s.server_env == (("OPENROUTER_API_KEY", None), ("JUDGE_TOKEN", "my_judge"))
    assert load_settings({"HOME": "/tmp"}).server_env == ()


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("9LIVES", "neither a variable name nor INSTANCE:NAME"),
        ("judge:", "neither a variable name"),
        ("a b:KEY", "neither a variable name"),
        ("PATH", "set or owned by gym-runtime"),
        ("judge:RAY_ADDRESS", "set or owned by gym-runtime"),
        ("UV_INDEX_URL", "set or owned"),
        ("GYM_RUNTIME_POLICY_API_KEY", "set or owned"),
        ("https_proxy", "set or owned"),
        ("PYTHONPATH", "set or owned"),
        ("LD_PRELOAD", "set or owned"),
    ],
)
def test_bad_server_env_entry_names_the_variable(value: str, why: str) -> None:
    with pytest.raises(SettingsError) as ei:
        load_settings({"HOME": "/tmp", "GYM_RUNTIME_SERVER_ENV": value})
    assert ei.value.code == "GR-SETTINGS-SERVER-ENV" and "GYM_RUNTIME_SERVER_ENV" in ei.value.message
    assert why in ei.value.message


def test_no_variable_the_server_contract_sets_can_be_passed_through(tmp_path) -> None:
    """Bug guard: a passed variable would silently replace what the contract sets (PATH, the config)."""
    from pathlib import Path

    from gym_runtime.settings import SERVER_ENV_RESERVED, SERVER_ENV_RESERVED_PREFIXES
    from gym_runtime.supervise import contract

    env = contract.server_env("acme", tmp_path, Path("/v/bin/python"), tmp_path, {})
    keys = (
        set(env)
        | set(contract.private_env("x: 1"))
        | {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"}
    )
    assert {k for k in keys if k not in SERVER_ENV_RESERVED and not k.startswith(SERVER_ENV_RESERVED_PREFIXES)} == set()


def test_sandbox_backend_defaults_to_local_and_is_read_from_its_variable() -> None:
    assert load_settings({"HOME": "/tmp"}).sandbox_backend == "local"
    s = load_settings({"HOME": "/tmp", "GYM_RUNTIME_SANDBOX_BACKEND": "opensandbox"})
    assert s.sandbox_backend == "opensandbox" and s.opensandbox is None  # no OPENSANDBOX_DOMAIN: refused at start
    with pytest.raises(SettingsError) as e:
        load_settings({"HOME": "/tmp", "GYM_RUNTIME_SANDBOX_BACKEND": "docker"})
    assert e.value.code == "GR-SETTINGS-SANDBOX-BACKEND" and e.value.exit_code == 1


def test_opensandbox_connection_keeps_its_key_out_of_repr_and_server_env() -> None:
    s = load_settings(
        {
            "HOME": "/tmp",
            "OPENSANDBOX_DOMAIN": "osb.internal:8080",
            "OPENSANDBOX_API_KEY": "k-123",
            "OPENSANDBOX_PROTOCOL": "https",
            "GYM_RUNTIME_OPENSANDBOX_IMAGE": "localhost/gym:1",
            "GYM_RUNTIME_OPENSANDBOX_DAEMON_HOST": "10.88.0.1",
        }
    )
    c = s.opensandbox
    assert (c.url, c.api_key, c.image, c.daemon_host, c.cpu) == (
        "https://osb.internal:8080",
        "k-123",
        "localhost/gym:1",
        "10.88.0.1",
        "1",
    )
    assert "k-123" not in repr(s) and "k-123" not in str(c.describe())
    assert c.outage_s == 600.0  # the sandboxes' TTL (case C73)
    longer = {"HOME": "/tmp", "OPENSANDBOX_DOMAIN": "osb:8080", "GYM_RUNTIME_OPENSANDBOX_OUTAGE_S": "900"}
    assert load_settings(longer).opensandbox.outage_s == 900.0
    with pytest.raises(SettingsError, match="OPENSANDBOX_API_KEY is set or owned by gym-runtime"):
        load_settings({"HOME": "/tmp", "GYM_RUNTIME_SERVER_ENV": "OPENSANDBOX_API_KEY"})


@pytest.mark.parametrize(
    "var, value",
    [
        ("OPENSANDBOX_PROTOCOL", "ftp"),
        ("GYM_RUNTIME_OPENSANDBOX_CPU", "-1"),
        ("GYM_RUNTIME_OPENSANDBOX_DAEMON_HOST", "gateway.local"),
        ("GYM_RUNTIME_OPENSANDBOX_OUTAGE_S", "0"),
        ("GYM_RUNTIME_OPENSANDBOX_OUTAGE_S", "ten minutes"),
        ("GYM_RUNTIME_OPENSANDBOX_OUTAGE_S", "inf"),
    ],
)
def test_bad_opensandbox_settings_name_their_variable(var: str, value: str) -> None:
    with pytest.raises(SettingsError, match=var) as e:
        load_settings({"HOME": "/tmp", "OPENSANDBOX_DOMAIN": "osb:8080", var: value})
    assert e.value.code == "GR-SETTINGS-OPENSANDBOX"


def test_uv_never_gets_the_opensandbox_credential() -> None:
    from gym_runtime.venvs.uvrun import make_env

    env = make_env({"PATH": "/usr/bin", "OPENSANDBOX_API_KEY": "k-123", "OPENSANDBOX_DOMAIN": "osb:8080"}, None)
    assert "OPENSANDBOX_API_KEY" not in env.env and "OPENSANDBOX_API_KEY" in env.scrubbed


def test_preload_is_on_unless_switched_off_and_an_odd_value_is_refused() -> None:
    assert load_settings({}).preload is True
    assert load_settings({"GYM_RUNTIME_PRELOAD": "OFF"}).preload is False
    with pytest.raises(SettingsError) as refused:
        load_settings({"GYM_RUNTIME_PRELOAD": "sometimes"})
    assert refused.value.code == "GR-SETTINGS-PRELOAD"


def test_ray_for_undeclared_classes_is_when_imported_unless_always_and_an_odd_value_is_refused() -> None:
    assert load_settings({}).ray_undeclared == "when-imported"
    assert load_settings({"GYM_RUNTIME_RAY_UNDECLARED": " Always "}).ray_undeclared == "always"
    with pytest.raises(SettingsError) as refused:
        load_settings({"GYM_RUNTIME_RAY_UNDECLARED": "never"})
    assert refused.value.code == "GR-SETTINGS-RAY-UNDECLARED" and "GYM_RUNTIME_RAY_UNDECLARED" in refused.value.message
