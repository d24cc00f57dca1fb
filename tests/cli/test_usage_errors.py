"""Usage errors name the command: its own usage and `--help`, and no abbreviated flag is taken for
another (argparse's prefix matching turned the typo `--sample 2` into `--samples 2`)."""

from __future__ import annotations

import pytest

from gym_runtime.cli.main import main


@pytest.mark.parametrize(
    "argv",
    [
        ["dry-run", "pkg", "--dataset", "rows.jsonl", "--fast"],
        ["dry-run", "pkg", "--dataset", "rows.jsonl", "--sample", "2"],
        ["up", "pkg", "--max-concurrent", "4"],
    ],
)
def test_an_unknown_or_abbreviated_flag_is_a_usage_error_of_that_command(capsys, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    assert err.startswith(f"usage: gym-runtime {argv[0]} ") and "error[GR-USAGE]: unrecognized arguments:" in err
    assert f"hint: run `gym-runtime {argv[0]} --help`" in err


def test_vendor_without_a_platform_names_the_flag_and_the_variable(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("GYM_RUNTIME_VENDOR_PLATFORM", raising=False)
    rc = main(["vendor", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert "error[GR-USAGE]: vendor needs a target platform: give --platform linux/amd64 or linux/arm64" in err
    assert "GYM_RUNTIME_VENDOR_PLATFORM" in err


def test_vendor_takes_its_platform_from_the_variable(capsys, monkeypatch, tmp_path) -> None:
    """The runtime images set GYM_RUNTIME_VENDOR_PLATFORM: `vendor PKG` then goes on to the package."""
    monkeypatch.setenv("GYM_RUNTIME_VENDOR_PLATFORM", "linux/arm64")
    rc = main(["vendor", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "is not an environment package" in err and "target platform" not in err
