"""Where the Ray switch goes (gym_runtime/ray/switch.py): only venvs that hold NeMo Gym get
the module and its ``.pth`` line; a venv built before them, or with an older module, gets them at
its next start."""

from __future__ import annotations

from pathlib import Path

from gym_runtime.ray.switch import MODULE, PTH, PTH_LINE, SOURCE, ensure_ray_switch, install_ray_switch


def venv(root: Path, gym: bool) -> Path:
    site = root / "lib" / "python3.13" / "site-packages"
    site.mkdir(parents=True)
    if gym:
        (site / "nemo_gym-0.7.0.dist-info").mkdir()
    return root


def test_only_a_venv_holding_gym_gets_the_switch(tmp_path: Path) -> None:
    with_gym, without = venv(tmp_path / "a", True), venv(tmp_path / "b", False)
    assert install_ray_switch(with_gym) is True and install_ray_switch(without) is False
    site = with_gym / "lib" / "python3.13" / "site-packages"
    assert (site / f"{MODULE}.py").read_bytes() == SOURCE.read_bytes()
    assert (site / PTH).read_text() == PTH_LINE == f"import {MODULE}; {MODULE}.install()\n"
    assert sorted(p.name for p in (without / "lib" / "python3.13" / "site-packages").iterdir()) == []


def test_an_older_or_missing_switch_is_written_again_and_a_current_one_left(tmp_path: Path) -> None:
    v = venv(tmp_path / "v", True)
    site = v / "lib" / "python3.13" / "site-packages"
    assert ensure_ray_switch(v) is True  # built before the switch existed
    assert ensure_ray_switch(v) is False  # current: nothing written
    (site / f"{MODULE}.py").write_text("# an older switch\n")
    assert ensure_ray_switch(v) is True and (site / f"{MODULE}.py").read_bytes() == SOURCE.read_bytes()
    assert ensure_ray_switch(venv(tmp_path / "plain", False)) is False


def test_a_release_without_the_sdks_decision_stops_a_told_server_that_would_start_ray(monkeypatch) -> None:
    """Another NeMo Gym release whose ``server_utils`` has ``initialize_ray`` but no
    ``_server_uses_ray``: a server told to run without Ray stops there instead of starting a cluster."""
    import importlib.util
    import types

    import pytest

    spec = importlib.util.spec_from_file_location("switch_under_test", SOURCE)
    switch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(switch)
    started = []
    sdk = types.SimpleNamespace(initialize_ray=lambda: started.append(1))
    switch._wrap(sdk)
    monkeypatch.delenv(switch.VAR, raising=False)
    sdk.initialize_ray()
    assert started == [1]  # not told: the release's own behaviour
    monkeypatch.setenv(switch.VAR, "1")
    with pytest.raises(RuntimeError, match="GYM_RUNTIME_RAY_UNDECLARED=always"):
        sdk.initialize_ray()
    assert started == [1]
