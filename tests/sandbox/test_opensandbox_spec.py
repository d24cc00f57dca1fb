"""What each OpenSandbox sandbox is asked for (sandbox/opensandbox/spec.py): the exact
``networkPolicy``, ``resourceLimits``, ``volumes`` and labels, as the SDK sends them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from opensandbox.adapters.converter.sandbox_model_converter import SandboxModelConverter

from sandbox.limits import ResourceLimits
from sandbox.opensandbox.service import leftovers
from sandbox.opensandbox.spec import (
    LABEL_OWNER,
    LABEL_RUN,
    LABEL_SERVER,
    RunLabels,
    network_policy,
    resource_limits,
    sdk_network_policy,
    sdk_volumes,
    volumes,
)
from sandbox.policy import EgressPolicy

ENDPOINTS = ["http://127.0.0.1:8000/v1", "http://10.0.0.5:8000/v1", "http://policy.example:9000/v1"]


def _sent(wire: dict) -> dict:
    """The body the SDK puts on the wire for the policy (its own converter)."""
    return SandboxModelConverter.to_api_network_policy(sdk_network_policy(wire)).to_dict()


def test_internet_off_allows_only_the_daemon_and_the_policy_endpoints() -> None:
    policy = EgressPolicy.from_environ({"NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW": "pypi.org"}, ENDPOINTS)
    expected = {
        "defaultAction": "deny",
        "egress": [
            {"action": "allow", "target": "10.88.0.1/32"},  # the daemon: head server and relays
            {"action": "allow", "target": "10.0.0.5/32"},  # a policy endpoint by address
            {"action": "allow", "target": "policy.example"},  # a policy endpoint by name
        ],
    }  # 127.0.0.1:8000 is reached through the daemon (no rule: a sandbox's loopback is its own)
    assert network_policy(policy, ["10.88.0.1"]) == expected
    assert _sent(expected) == expected


def test_internet_on_adds_the_operator_list_and_the_defaults_in_order() -> None:
    policy = EgressPolicy.from_environ(
        {
            "NMP_RL_SANDBOX_ALLOW_INTERNET": "yes",
            "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW": "pypi.org,*.hf.co:8443,1.2.3.4,[2001:db8::1],api.acme.com",
        },
        ENDPOINTS[2:],
    )
    wire = network_policy(policy, ["fd00::1"])
    assert wire == {
        "defaultAction": "deny",
        "egress": [
            {"action": "allow", "target": t}
            for t in (
                "fd00::1/128",
                "policy.example",
                "pypi.org",
                "*.hf.co",
                "1.2.3.4/32",
                "2001:db8::1/128",
                "api.acme.com",
                "*.com",
                "*.org",
            )
        ],
    }
    assert _sent(wire) == wire


def test_repeated_targets_are_sent_once() -> None:
    policy = EgressPolicy.from_environ(
        {"NMP_RL_SANDBOX_ALLOW_INTERNET": "1", "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW": "*.com,policy.example:9000"},
        ENDPOINTS[2:],
    )
    targets = [r["target"] for r in network_policy(policy)["egress"]]
    assert targets == ["policy.example", "*.com", "*.org"]


def test_resource_limits_carry_cpu_and_memory() -> None:
    assert resource_limits(ResourceLimits(memory_mb=2048, pids=4096), "1") == {"cpu": "1", "memory": "2048Mi"}
    assert resource_limits(ResourceLimits(memory_mb=None), "0.5") == {"cpu": "0.5"}


def test_volumes_mount_each_tree_at_its_own_path(tmp_path: Path) -> None:
    venv, tree, work = tmp_path / "venvs" / "v1", tmp_path / "pkg", tmp_path / "pkg" / "out"
    wire = volumes([venv, tree, tree / "sub", venv / "lib"], [work, work / "x"])
    assert wire == [
        {"name": "ro-0", "host": {"path": str(tree)}, "mountPath": str(tree), "readOnly": True},
        {"name": "ro-1", "host": {"path": str(venv)}, "mountPath": str(venv), "readOnly": True},
        {"name": "rw-0", "host": {"path": str(work)}, "mountPath": str(work), "readOnly": False},
    ]
    sent = [SandboxModelConverter.to_api_volume(v).to_dict() for v in sdk_volumes(wire)]
    assert sent == wire


def test_labels_name_run_owner_and_server(tmp_path: Path) -> None:
    a, b = RunLabels.new(tmp_path, "node-1"), RunLabels.new(tmp_path, "node-1")
    assert a.owner == b.owner and a.run != b.run and len(a.run) == 16  # same slot, a new run each start
    assert RunLabels.new(tmp_path / "other", "node-1").owner != a.owner
    assert RunLabels.new(tmp_path, "node-2").owner != a.owner
    meta = a.metadata("my server/ÿ" + "x" * 80)
    assert meta[LABEL_RUN] == a.run and meta[LABEL_OWNER] == a.owner
    assert meta[LABEL_SERVER].startswith("my-server--") and len(meta[LABEL_SERVER]) <= 63


def test_leftovers_are_other_runs_of_the_same_slot() -> None:
    me = RunLabels("run2", "slot1")
    infos = [
        SimpleNamespace(id="a", metadata={LABEL_OWNER: "slot1", LABEL_RUN: "run1"}),
        SimpleNamespace(id="b", metadata={LABEL_OWNER: "slot1", LABEL_RUN: "run2"}),
        SimpleNamespace(id="c", metadata={LABEL_OWNER: "slot9", LABEL_RUN: "run1"}),
        SimpleNamespace(id="d", metadata=None),
    ]
    assert leftovers(infos, me) == ["a"]
