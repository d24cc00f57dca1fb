"""Policy decisions (sandbox/policy.py): the rules and NeMo RL's sandbox egress policy."""

from __future__ import annotations

import pytest

from gym_runtime.errors import SettingsError
from sandbox import Decision, EgressPolicy

ON = {
    "NMP_RL_SANDBOX_ALLOW_INTERNET": "true",
    "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW": "api.example.net, *.hf.co, x.example.net:8443, 10.0.0.5",
}
ENDPOINTS = ["http://127.0.0.1:8000/v1", "https://vllm.example.invalid:8000/v1", "http://10.1.2.3:9000/v1"]


@pytest.fixture
def on() -> EgressPolicy:
    return EgressPolicy.from_environ(ON, ENDPOINTS)


@pytest.mark.parametrize(
    ("host", "port", "allowed", "rule"),
    [
        ("allowed.example.com", 443, True, "allow:*.com"),
        ("ALLOWED.Example.COM.", 80, True, "allow:*.com"),
        ("www.example.org", 443, True, "allow:*.org"),
        ("api.example.net", 443, True, "allow:api.example.net"),
        ("deep.api.example.net", 443, False, "no-match"),
        ("a.b.hf.co", 443, True, "allow:*.hf.co"),
        ("hf.co", 443, False, "no-match"),  # *.x matches below x, never x itself
        ("allowed.example.com", 22, False, "port-not-allowed:22"),
        ("x.example.net", 8443, True, "allow:x.example.net:8443"),
        ("x.example.net", 443, False, "port-not-allowed:443"),  # an entry naming a port allows only that port
        ("evil.example.net", 443, False, "no-match"),
        ("10.0.0.5", 443, True, "allow:10.0.0.5"),
        ("10.0.0.6", 443, False, "ip-literal"),
        ("127.0.0.1", 9001, True, "loopback-peer"),
        ("localhost", 9001, True, "loopback-peer"),
        ("::1", 9001, True, "loopback-peer"),
        ("[::1]", 9001, True, "loopback-peer"),
        ("127.0.0.1", 8000, True, "policy-endpoint"),
        ("vllm.example.invalid", 8000, True, "policy-endpoint"),
        ("vllm.example.invalid", 443, False, "no-match"),
        ("10.1.2.3", 9000, True, "policy-endpoint"),
        ("a..b.com", 443, False, "bad-host"),
        ("bad_host!.com", 443, False, "bad-host"),
    ],
)
def test_decide(on, host, port, allowed, rule):
    assert on.decide(host, port) == Decision(allowed, rule)


@pytest.mark.parametrize(
    "spelling",
    [
        "127.1",
        "2130706433",
        "0x7f.1",
        "0x7f000001",
        "0177.0.0.1",
        "1.2.3.4",
        "8.8.8.8",
        "[2606:4700::1111]",
        "2606:4700::1111",
        "169.254.169.254",
        "[fe80::1]",
        "1.2.3.999",
        "::ffff:127.0.0.1",
    ],
)
def test_ip_literals_denied_in_every_spelling(on, spelling):
    d = on.decide(spelling, 443)
    assert not d.allowed and d.rule == "ip-literal", (spelling, d)


@pytest.mark.parametrize(
    "ip",
    [
        "10.0.0.1",
        "100.64.0.1",
        "169.254.169.254",
        "172.16.0.1",
        "192.168.0.1",
        "198.18.0.1",
        "224.0.0.1",
        "240.0.0.1",
        "127.0.0.1",
        "0.0.0.0",
        "fd00::1",
        "fe80::1",
        "::1",
        "::ffff:10.0.0.1",
        "2001:db8::1",
    ],
)
def test_names_resolving_into_special_ranges_are_denied(on, ip):
    d = on.decide("rebind.example.com", 443, ["93.184.216.34", ip])
    assert not d.allowed and d.rule.startswith(f"resolved-special:{ip} ")


@pytest.mark.parametrize("ip", ["8.8.8.8", "2606:4700::1111"])
def test_public_resolutions_pass(on, ip):
    assert on.decide("ok.example.com", 443, [ip]).allowed


def test_policy_endpoint_skips_range_check(on):
    assert on.decide("vllm.example.invalid", 8000, ["10.9.9.9"]).allowed


def test_internet_off_denies_everything_but_peers_and_endpoints():
    off = EgressPolicy.from_environ({"NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW": "api.example.net"}, ENDPOINTS)
    assert off.decide("allowed.example.com", 443) == Decision(False, "internet-off")
    assert off.decide("api.example.net", 443).rule == "internet-off"
    assert off.decide("127.0.0.1", 9001).allowed and off.decide("127.0.0.1", 8000).allowed
    assert off.describe()["allowed_names"] == [] and off.describe()["operator_list_active"] is False


def test_default_is_off_and_describe_is_json_ready(on):
    import json

    assert not EgressPolicy.from_environ({}).allow_internet
    desc = json.loads(json.dumps(on.describe()))
    assert desc["default"] == "deny" and "*.com" in desc["allowed_names"] and "api.example.net" in desc["allowed_names"]
    assert "169.254.0.0/16" in desc["denied_ranges"]


@pytest.mark.parametrize("value", ["true", "TRUE", "1", "yes", "false", "0", "no", "No"])
def test_bool_values(value):
    assert EgressPolicy.from_environ({"NMP_RL_SANDBOX_ALLOW_INTERNET": value}).allow_internet == (
        value.lower() in {"true", "1", "yes"}
    )


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("NMP_RL_SANDBOX_ALLOW_INTERNET", "maybe"),
        ("NMP_RL_SANDBOX_ALLOW_INTERNET", "on"),
        ("NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW", "a b.com"),
        ("NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW", "ok.com,*."),
        ("NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW", "a.*.com"),
        ("NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW", "x.com:99999"),
        ("NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW", "x.com:http"),
        ("NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW", "127.1"),
    ],
)
def test_bad_settings_name_variable_and_value(var, value):
    with pytest.raises(SettingsError) as e:
        EgressPolicy.from_environ({var: value})
    assert var in e.value.message and value in e.value.message
    assert e.value.code.startswith("GR-SETTINGS") and e.value.hint
