"""The local base's inputs, without building anything: which apt sources of a host the base is
made from (both apt formats, disabled entries left out) and the skip reason when none serves
Debian forky, the suite whose python3.13 runs the current Gym release."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.debian_base import BaseUnavailable, apt_uris, host_mirror, recipe_digest


def test_apt_uris_reads_both_formats_in_apt_order(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# deb http://commented.invalid/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://one.invalid/debian bookworm main\n"
        "deb-src http://src.invalid/debian bookworm main\n"
    )
    (tmp_path / "sources.list.d" / "extra.list").write_text("deb http://two.invalid/debian trixie main # note\n")
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# http://snapshot.invalid/archive\nURIs: http://three.invalid/debian\nSuites: trixie\n"
        "Components: main\n\n"
        "Types: deb-src\nURIs: http://src2.invalid/debian\nSuites: trixie\n\n"
        "Types: deb\nURIs: http://off.invalid/debian\nSuites: trixie\nEnabled: no\n"
    )
    (tmp_path / "sources.list.d" / "old.list.disabled").write_text("deb http://disabled.invalid/debian x main\n")
    assert apt_uris(tmp_path) == [
        "http://one.invalid/debian",
        "http://two.invalid/debian",
        "http://three.invalid/debian",
    ]


def test_no_mirror_serving_the_suite_is_a_reason_naming_what_was_tried() -> None:
    with pytest.raises(BaseUnavailable) as e:
        host_mirror(["http://127.0.0.1:1/debian", "file:///srv/mirror", "http://127.0.0.1:1/debian"], timeout_s=2)
    assert str(e.value).startswith("no apt source of this host serves Debian forky (tried: http://127.0.0.1:1/debian (")
    assert str(e.value).count("127.0.0.1:1") == 1


def test_recipe_digest_is_per_architecture() -> None:
    assert recipe_digest("amd64") != recipe_digest("arm64") and recipe_digest("amd64") == recipe_digest("amd64")
