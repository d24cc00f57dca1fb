"""A top-level block a server names by string counts as a reference for secret scoping: Gym's
sandbox provider block (``sandbox:``, named by ``sandbox_provider: sandbox``; NeMo Gym 0.7.0
``nemo_gym/sandbox/config.py``) and a block named by ``provider_config_ref`` reach the server that
names them with their keys unmasked, and no other server; such a ``sandbox`` block is no egress
setting (no ``GR-CONFIG-NOT-A-SETTING`` warning)."""

from __future__ import annotations

import pytest
import yaml

from gym_runtime.config.redact import MASK
from tests.config.test_secrets import AGENT, MODEL, TOOLS, inner, inst

KEY = "osb-" + "7f3a9c1e"
# the shape of Gym 0.7.0's `nemo_gym/sandbox/providers/opensandbox/configs/opensandbox.yaml`
SANDBOX = {
    "default_metadata": {"sandbox-api": "opensandbox-sdk"},
    "opensandbox": {
        "connection": {
            "domain": "opensandbox.invalid",
            "api_key": "${oc.env:GR_TEST_OPENSANDBOX_API_KEY}",
            "protocol": "http",
        },
        "create": {"timeout_s": 1500},
    },
}


@pytest.fixture
def env(pkg_with, build, monkeypatch):
    monkeypatch.setenv("GR_TEST_OPENSANDBOX_API_KEY", KEY)

    def make(extra: dict, **instances: dict):
        root = pkg_with({"configs/a.yaml": {**instances, **extra}}, [MODEL, TOOLS, AGENT])
        return build(root)

    return make


def test_the_server_naming_the_sandbox_block_receives_its_key_and_no_other(env) -> None:
    m = env(
        {"sandbox": SANDBOX},
        swe=inst(*TOOLS, domain="coding", sandbox_provider="sandbox"),
        agent=inst(*AGENT, resources_server={"type": "resources_servers", "name": "swe"}),
    )
    path = "sandbox.opensandbox.connection.api_key"
    assert m.secrets.keys_for("swe", m.data) == [path]
    assert m.secrets.keys_for("agent", m.data) == []
    assert m.secrets.named == {"swe": ("sandbox",)}
    own = m.secrets.view(m.data, "swe")
    assert own["sandbox"]["opensandbox"]["connection"]["api_key"] == KEY
    masked: list[str] = []
    other = m.secrets.view(m.data, "agent", masked)
    assert other["sandbox"]["opensandbox"]["connection"]["api_key"] == MASK and masked == [path, "policy_api_key"]
    assert KEY not in yaml.safe_dump(other) and KEY not in m.to_yaml()  # dumps mask it as before
    assert not [w for w in m.warnings if w.code == "GR-CONFIG-NOT-A-SETTING"]  # a provider block, not egress


def test_provider_config_ref_at_any_depth_and_two_blocks(env) -> None:
    second = {"e2b": {"connection": {"api_key": "e2b-literal-key"}}}
    m = env(
        {"sandbox": SANDBOX, "sandbox_e2b": second},
        swe=inst(*TOOLS, domain="coding", sandbox_provider="sandbox"),
        agent=inst(*AGENT, borrow=[{"connection": {"kind": "direct", "provider_config_ref": "sandbox_e2b"}}]),
    )
    assert m.secrets.keys_for("agent", m.data) == ["sandbox_e2b.e2b.connection.api_key"]
    assert m.secrets.keys_for("swe", m.data) == ["sandbox.opensandbox.connection.api_key"]
    assert (
        inner(m.secrets.view(m.data, "agent"), "agent")["borrow"][0]["connection"]["provider_config_ref"]
        == "sandbox_e2b"
    )


@pytest.mark.parametrize("value", ["tools", "nothing_here", "${oc.env:GR_TEST_UNSET_PROVIDER,none}"])
def test_a_string_naming_an_instance_or_nothing_is_no_reference(env, value: str) -> None:
    m = env({"sandbox": SANDBOX}, tools=inst(*TOOLS, domain="coding"), agent=inst(*AGENT, sandbox_provider=value))
    assert m.secrets.keys_for("agent", m.data) == [] and m.secrets.named == {}
    warned = [w for w in m.warnings if w.code == "GR-CONFIG-NOT-A-SETTING"]
    assert len(warned) == 1 and warned[0].key == "sandbox"  # a `sandbox` block nobody names: still a warning


def test_an_interpolated_provider_name_counts_as_resolved(env, monkeypatch) -> None:
    monkeypatch.setenv("GR_TEST_PROVIDER", "sandbox")
    m = env({"sandbox": SANDBOX}, swe=inst(*TOOLS, domain="coding", sandbox_provider="${oc.env:GR_TEST_PROVIDER}"))
    assert m.secrets.keys_for("swe", m.data) == ["sandbox.opensandbox.connection.api_key"]
