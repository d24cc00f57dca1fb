"""Which sandbox provider a config gets (``GYM_RUNTIME_SANDBOX_PROVIDER``): a provider this host
cannot give becomes ``gym_runtime`` with a note saying which block and why, named blocks and inline
ones alike, ``default_metadata`` kept; ``config`` keeps every block; a top-level provider block is
no egress setting when a server names it (no ``GR-CONFIG-NOT-A-SETTING``)."""

from __future__ import annotations

import copy

from gym_runtime.config import _settings_in_config
from gym_runtime.config.sources import Sources
from gym_runtime.task_sandboxes.offer import offer

DATA = {
    "sandbox": {"docker": {"create": {"network": "none"}}, "default_metadata": {"bench": "x"}},
    "swe": {"resources_servers": {"swe": {"sandbox_provider": "sandbox", "sandbox_spec": {"image": "x"}}}},
    "litmus": {"resources_servers": {"litmus": {"sandbox_provider": {"opensandbox": {"connection": {}}}}}},
    "mine": {"resources_servers": {"mine": {"sandbox_provider": {"gym_runtime": {}}}}},
}


def test_auto_replaces_what_this_host_cannot_give(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)  # no docker binary on this pod
    data = copy.deepcopy(DATA)
    notes = offer(data, dict.fromkeys(("swe", "litmus", "mine")), "auto", None)
    assert data["sandbox"] == {"gym_runtime": {}, "default_metadata": {"bench": "x"}}
    assert data["litmus"]["resources_servers"]["litmus"]["sandbox_provider"] == {"gym_runtime": {}}
    assert data["swe"]["resources_servers"]["swe"]["sandbox_provider"] == "sandbox"  # the reference stays
    assert len(notes) == 2
    assert "`sandbox` (named by swe.resources_servers.swe.sandbox_provider): 'docker'" in notes[0]
    assert "no `docker` binary on PATH" in notes[0] and "GYM_RUNTIME_SANDBOX_PROVIDER=config" in notes[0]
    assert "litmus.resources_servers.litmus.sandbox_provider: 'opensandbox'" in notes[1]


def test_config_keeps_and_gym_runtime_replaces_every_block():
    data = copy.deepcopy(DATA)
    assert offer(data, {"swe": None, "litmus": None}, "config", None) == [] and data == DATA
    notes = offer(data, {"swe": None, "litmus": None}, "gym_runtime", None)
    assert len(notes) == 2 and "GYM_RUNTIME_SANDBOX_PROVIDER=gym_runtime" in notes[0]
    notes = offer(copy.deepcopy(DATA), {"mine": None}, "auto", "no namespaces here")
    assert notes == [
        "sandbox provider mine.resources_servers.mine.sandbox_provider: gym_runtime, but this host "
        "cannot make task sandboxes (no namespaces here)"
    ]


def test_a_provider_block_is_no_egress_setting():
    assert _settings_in_config({"sandbox": {"docker": {}}}, Sources(), {"swe": ("sandbox",)}) == []
    (w,) = _settings_in_config({"sandbox": {"egress_allowlist": ["x.example.net"]}}, Sources(), {})
    assert w.code == "GR-CONFIG-NOT-A-SETTING"
