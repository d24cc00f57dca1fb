"""Every problem at once: missing policy values no longer hide a broken server reference, and
``validate``'s hints are the whole fix (following one never leads to a second error)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from gym_runtime.cli.main import main
from tests.helpers.packages import make_package


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_missing_policy_values_and_a_broken_reference_in_one_report(tmp_path: Path, capsys, monkeypatch) -> None:
    for var in ("GYM_RUNTIME_POLICY_BASE_URL", "GYM_RUNTIME_POLICY_API_KEY", "GYM_RUNTIME_POLICY_MODEL_NAME"):
        monkeypatch.delenv(var, raising=False)
    root = make_package(tmp_path / "p", "native-v1")
    cfg = root / "resources_servers/acme_math/configs/acme_math.yaml"
    data = yaml.safe_load(cfg.read_text())
    data["acme_math_agent"]["responses_api_agents"]["acme_agent"]["resources_server"]["name"] = "acme_maths"
    cfg.write_text(yaml.safe_dump(data))
    code, out, err = _run(capsys, "config", str(root), "--json")  # no --policy-base-url etc.
    assert code == 1
    found = {(v["code"], v["key"]) for v in json.loads(out)["error"]["violations"]}
    assert ("GR-CONFIG-INTERPOLATION", "policy_model.responses_api_models.policy_stub.base_url") in found
    assert ("GR-CONFIG-REF", "acme_math_agent.responses_api_agents.acme_agent.resources_server") in found
    assert "1 server reference names no defined instance" in err and "Did you mean 'acme_math'?" in err


def test_configs_only_directory_hint_is_the_whole_fix(tmp_path: Path, capsys) -> None:
    root = make_package(tmp_path / "p", "native-v1")
    d = root / "resources_servers/acme_extra"
    (d / "configs").mkdir(parents=True)
    (d / "configs/extra.yaml").write_text(
        yaml.safe_dump(
            {"acme_extra": {"resources_servers": {"acme_extra": {"entrypoint": "app.py", "domain": "math"}}}}
        )
    )
    m = yaml.safe_load((root / "nemo-environment.yaml").read_text())
    m["config_paths"].append("resources_servers/acme_extra/configs/extra.yaml")
    (root / "nemo-environment.yaml").write_text(yaml.safe_dump(m))
    code, _, err = _run(capsys, "validate", str(root))
    assert code == 1 and "[GR-CONFIG-IMPLEMENTATION]" in err and "holds only configs/" in err
    assert (
        "add resources_servers/acme_extra/app.py (the entrypoint) and resources_servers/acme_extra/"
        "requirements.txt" in err
    )
    (d / "app.py").write_text("print('ok')\n")  # exactly what the hint says, nothing more
    (d / "requirements.txt").write_text("# none\n")
    code, out, err = _run(capsys, "validate", str(root))
    assert code == 0, err
    assert json.loads(out)["valid"] is True


def test_no_install_file_hint_names_the_entrypoint_too(tmp_path: Path, capsys) -> None:
    root = make_package(tmp_path / "p", "native-v1")
    d = root / "resources_servers/acme_math"
    (d / "requirements.txt").unlink()
    (d / "app.py").unlink()
    (d / "data").mkdir()
    code, _, err = _run(capsys, "validate", str(root))
    assert code == 1 and "[GR-PKG-SERVER-NO-INSTALL]" in err
    assert "add a requirements.txt (a comment line is fine) and the server's entrypoint (Gym servers use app.py)" in err
    (d / "requirements.txt").write_text("# none\n")
    (d / "app.py").write_text("print('ok')\n")
    assert _run(capsys, "validate", str(root))[0] == 0
