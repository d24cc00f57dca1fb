"""Which server receives which secret: references read from the unresolved config (direct, through
interpolations, nested, relative, ``oc.select``, ``oc.env`` of secret-named variables, copied
blocks), the package's ``secret_keys``, and per-server views that Gym can resolve again."""

from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf

from gym_runtime.config.redact import MASK
from gym_runtime.errors import ConfigError
from gym_runtime.supervise import contract

MODEL = ("responses_api_models", "m")
TOOLS = ("resources_servers", "tools")
AGENT = ("responses_api_agents", "agent")
KEY = "sk-test-secret"  # conftest's policy key


def inst(stype: str, impl: str, **inner) -> dict:
    return {stype: {impl: {"entrypoint": "app.py", **inner}}}


def inner(data: dict, name: str) -> dict:
    return next(iter(next(iter(data[name].values())).values()))


@pytest.fixture
def env(pkg_with, build):
    def make(extra: dict | None = None, **instances: dict):
        root = pkg_with({"configs/a.yaml": {**instances, **(extra or {})}}, [MODEL, TOOLS, AGENT])
        return build(root)

    return make


def test_policy_key_reaches_only_the_instance_that_interpolates_it(env) -> None:
    m = env(
        policy_model=inst(*MODEL, base_url="${policy_base_url}", api_key="${policy_api_key}"),
        tools=inst(*TOOLS, domain="math"),
        agent=inst(*AGENT, model_server={"type": "responses_api_models", "name": "policy_model"}),
    )
    pm = "policy_model.responses_api_models.m.api_key"
    assert m.secrets.keys_for("policy_model", m.data) == ["policy_api_key", pm]
    assert m.secrets.keys_for("tools", m.data) == [] and m.secrets.keys_for("agent", m.data) == []
    own = m.secrets.view(m.data, "policy_model")
    assert own["policy_api_key"] == KEY and inner(own, "policy_model")["api_key"] == KEY
    for other in ("tools", "agent"):
        masked: list[str] = []
        view = m.secrets.view(m.data, other, masked)
        assert KEY not in yaml.safe_dump(view) and masked == [pm, "policy_api_key"]
        assert view["policy_api_key"] == MASK and inner(view, "policy_model")["base_url"] == "http://127.0.0.1:8000/v1"
    assert m.data["policy_api_key"] == KEY  # the merged config itself is untouched


def test_nested_relative_select_and_string_interpolations(env, monkeypatch) -> None:
    monkeypatch.setenv("GR_TEST_JUDGE_API_KEY", "sk-judge")
    monkeypatch.setenv("GR_TEST_PLAIN", "judge-model")
    m = env(
        {
            "judge": {"password": "pw-1", "url": "http://judge.invalid"},
            "shared": {"bearer": "Bearer ${judge.password}"},
        },
        tools=inst(
            *TOOLS,
            domain="math",
            header="${shared.bearer}",  # two hops, under non-secret names
            endpoint="${oc.select:judge.url,x}",
            model="${oc.env:GR_TEST_PLAIN}",
        ),
        agent=inst(
            *AGENT,
            key="${oc.env:GR_TEST_JUDGE_API_KEY}",  # a secret-named variable, a plain key name
            conf={"token": "t-1", "copy": "${..conf.token}"},
        ),
        policy_model=inst(*MODEL, api_key="${policy_api_key}"),
    )
    tools, agent = m.secrets.keys_for("tools", m.data), m.secrets.keys_for("agent", m.data)
    assert sorted(tools) == ["judge.password", "shared.bearer", "tools.resources_servers.tools.header"]
    assert agent == [
        "agent.responses_api_agents.agent.conf.copy",
        "agent.responses_api_agents.agent.conf.token",
        "agent.responses_api_agents.agent.key",
    ]
    view = m.secrets.view(m.data, "tools")
    assert inner(view, "tools")["header"] == "Bearer pw-1" and inner(view, "tools")["model"] == "judge-model"
    assert inner(view, "agent")["key"] == MASK and inner(view, "agent")["conf"] == {"token": MASK, "copy": MASK}
    assert view["policy_api_key"] == MASK and view["judge"]["url"] == "http://judge.invalid"
    assert "sk-judge" not in yaml.safe_dump(view) and "t-1" not in yaml.safe_dump(view)
    assert "pw-1" not in yaml.safe_dump(m.secrets.view(m.data, "agent"))


def test_a_copied_block_carries_its_secrets(env) -> None:
    m = env(
        {"judge_block": {"api_key": "sk-block", "url": "http://judge.invalid"}},
        tools=inst(*TOOLS, domain="math", judge="${judge_block}"),
        agent=inst(*AGENT),
    )
    assert sorted(m.secrets.keys_for("tools", m.data)) == sorted(
        ["judge_block.api_key", "tools.resources_servers.tools.judge.api_key"]
    )
    view = m.secrets.view(m.data, "agent")
    assert inner(view, "tools")["judge"] == {"api_key": MASK, "url": "http://judge.invalid"}


def test_secret_keys_marks_extra_names_everywhere(env) -> None:
    m = env(
        {"secret_keys": ["x_auth", "Judge-Cred"], "judge-cred": "c-1"},
        tools=inst(*TOOLS, domain="math", x_auth="a-1", nested={"X_AUTH": "a-2"}, cred="${judge-cred}"),
        agent=inst(*AGENT),
    )
    assert sorted(m.secrets.keys_for("tools", m.data)) == sorted(
        [
            "judge-cred",
            "tools.resources_servers.tools.x_auth",
            "tools.resources_servers.tools.nested.X_AUTH",
            "tools.resources_servers.tools.cred",
        ]
    )
    masked: list[str] = []
    dump = m.redacted(masked)
    assert dump["secret_keys"] == ["x_auth", "Judge-Cred"]  # the list of names is not itself a secret
    assert "a-1" not in yaml.safe_dump(dump) and "c-1" not in yaml.safe_dump(dump) and len(masked) == 5


@pytest.mark.parametrize(
    "value,why",
    [("x_auth", "list of key names"), (["ok", "${x}"], "an interpolation"), (["ok", "a.b"], "'a.b'"), ([3], "3")],
)
def test_secret_keys_is_validated(pkg_with, build, value, why) -> None:
    root = pkg_with({"configs/a.yaml": {"secret_keys": value, "x": "y", "tools": inst(*TOOLS, domain="math")}}, [TOOLS])
    with pytest.raises(ConfigError) as e:
        build(root)
    bad = [v for v in e.value.violations if v.code == "GR-CONFIG-SECRET-KEYS"]
    assert len(bad) == 1 and why in bad[0].message and bad[0].file == "configs/a.yaml"
    assert bad[0].key.startswith("secret_keys") and "secret_keys: [" in bad[0].hint


def test_every_server_view_resolves_again_in_gym(env) -> None:
    """Gym loads NEMO_GYM_CONFIG_DICT with OmegaConf.create and resolves it (NeMo Gym 0.4.0
    ``server_utils.py``): a masked view must resolve completely, for every instance and as a whole."""
    m = env(
        {"judge": {"password": "pw-1"}},
        policy_model=inst(*MODEL, base_url="${policy_base_url}", api_key="${policy_api_key}"),
        tools=inst(*TOOLS, domain="math", header="Bearer ${judge.password}"),
        agent=inst(*AGENT, model_server={"type": "responses_api_models", "name": "policy_model"}),
    )
    addresses = {n: ("127.0.0.1", 20000 + i) for i, n in enumerate(m.instances)}
    inside = contract.config_view(m.data, addresses, ("127.0.0.1", 19999), None)
    for name in m.instances:
        cfg = OmegaConf.create(contract.server_config_yaml(inside, m.secrets, name))
        whole = OmegaConf.to_container(cfg, resolve=True)
        assert set(whole) == set(inside)
        own = OmegaConf.to_container(cfg[name], resolve=True)
        assert own == inside[name]  # its own block, secrets included, exactly as resolved by the daemon
