"""``vendor``: a complete closure from a loopback index, then a build against an empty index."""

from __future__ import annotations

from pathlib import Path

from gym_runtime.package import parse_target
from gym_runtime.venvs import build_venvs, plan_venvs
from gym_runtime.venvs.store import read_marker
from gym_runtime.venvs.vendor import vendor
from tests.helpers.index import SimpleIndex
from tests.helpers.wheels import build_wheel
from tests.venvs.conftest import merged_config, synthetic_pkg


def test_vendor_then_build_offline_against_an_empty_index(tmp_path: Path, make_settings) -> None:
    files = tmp_path / "files"
    build_wheel(files, "judgekit", "1.0.0", requires=["tinyparse>=0.3"])
    build_wheel(files, "tinyparse", "0.3.0")
    build_wheel(files, "tinyparse", "0.4.0", tags="cp313-cp313-manylinux_2_39_x86_64")  # too new for glibc 2.36
    build_wheel(files, "tinyparse", "0.4.0")
    build_wheel(files, "fastcodec", "1.0.0", tags="cp313-cp313-manylinux_2_17_x86_64.manylinux2014_x86_64")
    build_wheel(files, "fastcodec", "1.0.0", tags="cp313-cp313-manylinux_2_17_aarch64.manylinux2014_aarch64")
    for n, v in (("nemo-gym", "0.4.0"), ("ray", "2.60.0"), ("openai", "2.7.2"), ("pip", "25.0")):
        build_wheel(files, n, v)
    stale = build_wheel(tmp_path / "old", "stale", "9.9")
    pkg = synthetic_pkg(
        tmp_path / "pkg",
        {
            "acme": ("resources_servers", "judgekit\nfastcodec\n"),
            "agent": ("responses_api_agents", "-e nemo-gym[dev] @ ../../\n"),
        },
        wheels=[stale],
    )
    with SimpleIndex(files) as idx:
        settings = make_settings(idx.url)
        done = vendor(merged_config(pkg), settings, parse_target("linux/amd64", "3.13"))
    names = sorted(p.name for p in (pkg / "wheels").iterdir())
    assert "stale-9.9-py3-none-any.whl" not in names  # cleared first
    assert "tinyparse-0.4.0-py3-none-any.whl" in names  # the manylinux_2_39 file was not taken
    assert "fastcodec-1.0.0-cp313-cp313-manylinux_2_17_x86_64.manylinux2014_x86_64.whl" in names
    assert {d.name for d in done} >= {"judgekit", "tinyparse", "fastcodec", "nemo-gym", "ray", "openai", "pip"}
    # the closure builds with stage 1 against an empty index (make_settings' default)
    offline = make_settings()
    plan = plan_venvs(merged_config(pkg), offline, python="3.13")
    v = build_venvs(plan, offline).for_instance("agent")
    assert read_marker(v.path)["installed"]["nemo-gym"] == "0.4.0"


def test_auto_mode_keeps_image_pins_out_of_a_closure_whose_servers_do_not_use_the_sdk(
    tmp_path: Path, make_settings
) -> None:
    """Bug: every closure vendored nemo-gym, ray and openai (344 MB), and stage 2 then put them in
    every venv, so the daemon started Ray for servers that never use it."""
    files = tmp_path / "files"
    build_wheel(files, "judgekit", "1.0.0", requires=["openai"])
    for n, v in (("nemo-gym", "0.4.0"), ("ray", "2.60.0"), ("openai", "2.7.2"), ("openai", "3.0.0"), ("pip", "25.0")):
        build_wheel(files, n, v)
    pkg = synthetic_pkg(
        tmp_path / "pkg",
        {"acme": ("resources_servers", "judgekit\n")},
        wheels=[build_wheel(tmp_path / "old", "judgekit", "1.0.0", requires=["openai"])],
    )
    with SimpleIndex(files) as idx:
        vendor(merged_config(pkg), make_settings(idx.url), parse_target("linux/amd64", "3.13"))
        names = sorted(p.name for p in (pkg / "wheels").iterdir())
        assert not any(n.startswith(("nemo_gym-", "ray-")) for n in names), names
        assert "openai-2.7.2-py3-none-any.whl" in names  # the pin still applies, as a constraint
        vendor(merged_config(pkg), make_settings(idx.url, pin_mode="gym"), parse_target("linux/amd64", "3.13"))
        names = sorted(p.name for p in (pkg / "wheels").iterdir())
    assert {"nemo_gym-0.4.0-py3-none-any.whl", "ray-2.60.0-py3-none-any.whl"} <= set(names)
