"""``python_version: 3.10`` unquoted is the float 3.1 in YAML; the build then looked for Python 3.1
(bug). It is refused at config time with a "quote it" hint, for an instance and at the top level;
unambiguous numbers (3.12) and strings are fine."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_runtime.config import build_config
from gym_runtime.errors import ConfigError
from gym_runtime.package import load_package
from tests.helpers.packages import make_package


@pytest.mark.parametrize("where", ["instance", "top"])
def test_unquoted_python_version_is_refused_with_a_quote_hint(tmp_path: Path, where: str) -> None:
    pkg = load_package(make_package(tmp_path / "pkg"))
    key = "acme_math.resources_servers.acme_math.python_version" if where == "instance" else "python_version"
    with pytest.raises(ConfigError) as e:
        build_config(pkg, [f"{key}=3.10"], defaults=_POLICY)
    (v,) = [v for v in e.value.violations if v.code == "GR-CONFIG-PYTHON-VERSION"]
    assert v.key == key and "3.1" in v.message and '"3.10"' in v.hint


@pytest.mark.parametrize("given, kept", [("'3.10'", "3.10"), ("3.12", 3.12), ("3.13", 3.13)])
def test_quoted_or_unambiguous_python_version_is_fine(tmp_path: Path, given: str, kept: object) -> None:
    pkg = load_package(make_package(tmp_path / "pkg"))
    merged = build_config(pkg, [f"python_version={given}"], defaults=_POLICY)
    assert merged.data["python_version"] == kept


_POLICY = {"policy_base_url": "http://127.0.0.1:8000/v1", "policy_api_key": "k", "policy_model_name": "m"}
