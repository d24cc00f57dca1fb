"""KEY=VALUE overrides are accepted after flags, not only right after the package (bug: exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

from gym_runtime.cli.main import main

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "native-quickstart")


def test_override_after_flags_is_applied(capsys):
    rc = main(
        [
            "config",
            EXAMPLE,
            "--policy-base-url",
            "http://127.0.0.1:9/v1",
            "--policy-model-name",
            "m",
            "head_server.port=12345",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["config"]["policy_model_name"] == "m"
    assert out["config"]["head_server"]["port"] == 12345


def test_stray_flag_is_still_a_usage_error(capsys):
    try:
        main(["config", EXAMPLE, "--no-such-flag"])
    except SystemExit as e:
        assert e.code == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_override_on_a_command_without_overrides_is_a_usage_error(capsys):
    try:
        main(["doctor", "a=b"])
    except SystemExit as e:
        assert e.code == 2
    else:  # pragma: no cover
        raise AssertionError("expected a usage error")
