"""Case C21 (tests/cases/data/C21/README.md): ``oc.env`` gives strings; known fields get typed values.

The case's ``configs/flags.yaml`` is used as is; the three environments come from its
``env_cases.txt``. Its ``options`` block is written as a config file of the package: Gym reads
``skip_venv_if_present`` from the top level of the merged config (a well-known key, typed here),
while gym-runtime has no ``sandbox_enabled`` setting (isolation is the typed ``--isolation``
flag), so that key is a value of unknown type: the truthy-string warning is what it gets.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gym_runtime.cli.main import main
from gym_runtime.config import PolicyValues, build_config
from gym_runtime.errors import ConfigError
from gym_runtime.package import load_package
from gym_runtime.supervise.contract import config_view, to_yaml
from tests.helpers.cases import case_dir, case_package

PORT_KEY = "acme_math.resources_servers.acme_math.port"
DROP_KEY = "policy_model.responses_api_models.openai_model.drop_input_reasoning_items"
VARS = ("ACME_SKIP_VENV", "ACME_SANDBOX", "ACME_MATH_PORT", "POLICY_DROP_REASONING_ITEMS")


def env_case(n: int) -> dict[str, str]:
    """The variables of case ``n`` in the case's env_cases.txt (``VAR=value`` pairs on its line)."""
    line = next(
        ln for ln in (case_dir("C21") / "env_cases.txt").read_text().splitlines() if ln.startswith(f"case {n}:")
    )
    return dict(re.findall(r"([A-Z_]+)=([^,\s]+)", line.split("->")[0]))


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    cp = case_package("C21", tmp_path / "pkg")
    sketch = yaml.safe_load((case_dir("C21") / "nemo-environment.yaml").read_text())
    opts = cp.root / "responses_api_models/openai_model/configs/options.yaml"
    opts.write_text(yaml.safe_dump(sketch["options"]))  # ${oc.env:...} strings kept as written
    m = yaml.safe_load((cp.root / "nemo-environment.yaml").read_text())
    m["config_paths"].append(opts.relative_to(cp.root).as_posix())
    (cp.root / "nemo-environment.yaml").write_text(yaml.safe_dump(m))
    flags = cp.root / cp.moved["configs/flags.yaml"]  # acme_math needs Gym's domain to be a resources server
    flags.write_text(
        flags.read_text().replace(
            "entrypoint: app.py\n      port:", "entrypoint: app.py\n      domain: math\n      port:"
        )
    )
    return cp.root


def _build(pkg: Path, tmp_path: Path, monkeypatch, case: int):
    for var in VARS:
        monkeypatch.delenv(var, raising=False)
    for var, value in env_case(case).items():
        monkeypatch.setenv(var, value)
    none = tmp_path / "no_builtins"
    none.mkdir(exist_ok=True)
    return build_config(load_package(pkg), [], PolicyValues(), builtin_root=none)


def test_c21_case1_defaults_are_typed(pkg: Path, tmp_path: Path, monkeypatch) -> None:
    m = _build(pkg, tmp_path, monkeypatch, 1)
    assert env_case(1) == {}
    assert m.data["skip_venv_if_present"] is False  # 'False' is never treated as enabled
    assert m.data["acme_math"]["resources_servers"]["acme_math"]["port"] == 9101
    assert m.instances["acme_math"].port == 9101
    (w,) = m.warnings  # drop_input_reasoning_items: unknown type, false-looking string from oc.env
    assert (w.code, w.key) == ("GR-CONFIG-TRUTHY", DROP_KEY)
    assert "'False' (from POLICY_DROP_REASONING_ITEMS)" in w.message
    assert w.hint == "if it is a flag, write ${oc.decode:${oc.env:POLICY_DROP_REASONING_ITEMS,false}} to get a boolean"
    # what servers receive: typed values, unchanged by their own resolution
    sent = yaml.safe_load(to_yaml(config_view(m.data, {"acme_math": ("127.0.0.1", 9101)}, ("127.0.0.1", 1), None)))
    assert sent["skip_venv_if_present"] is False and sent["acme_math"]["resources_servers"]["acme_math"]["port"] == 9101


def test_c21_case2_variables_override(pkg: Path, tmp_path: Path, monkeypatch) -> None:
    m = _build(pkg, tmp_path, monkeypatch, 2)
    assert env_case(2) == {"ACME_SANDBOX": "false", "ACME_MATH_PORT": "9105"}
    assert m.instances["acme_math"].port == 9105
    warned = {w.key: w for w in m.warnings}
    assert "'false' (from ACME_SANDBOX)" in warned["sandbox_enabled"].message  # loud: it looks off but is truthy


def test_c21_case3_bad_port_is_rejected_with_key_and_variable(pkg: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    with pytest.raises(ConfigError) as e:
        _build(pkg, tmp_path, monkeypatch, 3)
    (v,) = e.value.violations
    assert (v.code, v.key) == ("GR-CONFIG-TYPE", PORT_KEY)
    assert v.message == "'ninety' (from ACME_MATH_PORT) is not an integer"
    assert v.file.endswith("configs/flags.yaml") and "ACME_MATH_PORT" in v.hint
    assert main(["config", str(pkg)]) == 1
    assert f"{PORT_KEY}: 'ninety' (from ACME_MATH_PORT) is not an integer" in capsys.readouterr().err


def test_known_flag_from_env_is_a_boolean(pkg: Path, tmp_path: Path, monkeypatch) -> None:
    """``use_absolute_ip: ${oc.env:X,false}`` (a Gym flag read by truthiness) must be the boolean False;
    ``num_workers`` the integer."""
    flags = pkg / "responses_api_models/openai_model/configs/flags.yaml"
    flags.write_text(
        flags.read_text().replace("domain: math", "domain: math\n      num_workers: ${oc.env:ACME_WORKERS,2}")
        + "use_absolute_ip: ${oc.env:ACME_ABSOLUTE_IP,false}\n"
    )
    merged = _build(pkg, tmp_path, monkeypatch, 1)
    assert merged.data["use_absolute_ip"] is False and merged.instances["acme_math"].config["num_workers"] == 2
    monkeypatch.setenv("ACME_ABSOLUTE_IP", "maybe")
    with pytest.raises(ConfigError) as e:
        build_config(load_package(pkg), [], PolicyValues(), builtin_root=tmp_path / "no_builtins")
    assert [v.message for v in e.value.violations] == ["'maybe' (from ACME_ABSOLUTE_IP) is not a boolean (true/false)"]
