"""Resolved values written for a second resolution (gym_runtime/config/escape.py): whatever string a
value holds, the YAML a server receives resolves to exactly it, however often it is resolved."""

from __future__ import annotations

import yaml
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from gym_runtime.config.escape import escape_string
from gym_runtime.supervise.contract import to_yaml

TEXT = st.text(alphabet="${}\\ ab:.'\"", max_size=24)


@given(TEXT)
def test_any_string_resolves_to_itself_through_the_child_yaml(value: str) -> None:
    text = to_yaml({"inst": {"resources_servers": {"impl": {"v": value, "n": [value, 3]}}}, "b": "B"})
    cfg = OmegaConf.create(text)
    for _ in range(3):  # the stored text never changes: every resolution gives the same value
        inner = OmegaConf.to_container(cfg, resolve=True)["inst"]["resources_servers"]["impl"]
        assert inner == {"v": value, "n": [value, 3]}
        assert cfg.inst.resources_servers.impl.v == value


def test_escape_forms() -> None:
    assert escape_string("Compare ${candidate}; costs are in $USD.") == "Compare \\${candidate}; costs are in $USD."
    assert escape_string("a \\${x}") == "a \\\\\\${x}"  # a literal backslash before ${ stays a backslash
    assert escape_string("no interpolation \\ here") == "no interpolation \\ here"
    loaded = yaml.safe_load(to_yaml({"k": "${a}", "n": 1, "t": True}))
    assert loaded == {"k": "\\${a}", "n": 1, "t": True}  # only strings change; types stay
