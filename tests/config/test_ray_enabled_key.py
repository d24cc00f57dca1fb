"""A ``ray_enabled`` key in a server's block is a warning, ``GR-CONFIG-RAY-ENABLED``, naming the key
and the file that set it (docs/architecture.md §7.6; :mod:`gym_runtime.config.ray_enabled`)."""

from __future__ import annotations

from pathlib import Path

from gym_runtime.config import build_config
from gym_runtime.gym_release import release_for
from gym_runtime.package import load_package
from tests.config.conftest import POLICY
from tests.config.test_environment_servers import AG, MODEL, RS, inst, native


def test_a_ray_enabled_key_is_one_warning_naming_its_key_and_file(tmp_path: Path) -> None:
    cfg = {
        "policy_model": inst(*MODEL),
        "res": inst(*RS, domain="math", ray_enabled=True),
        "agent": inst(
            *AG,
            resources_server={"type": "resources_servers", "name": "res"},
            model_server={"type": "responses_api_models", "name": "policy_model"},
        ),
    }
    rel = "resources_servers/r/configs/x.yaml"
    m = build_config(
        load_package(native(tmp_path, cfg, (MODEL, RS, AG), rel)), policy=POLICY, release=release_for("0.7.0", "test")
    )
    (w,) = [w for w in m.warnings if w.code == "GR-CONFIG-RAY-ENABLED"]
    assert (w.key, w.file) == ("res.resources_servers.r.ray_enabled", rel)
    assert "declare `ray_enabled = True`" in w.hint
