"""Usage errors name the command: its own usage and `--help`, and no abbreviated flag is taken for
another (argparse's prefix matching turned the typo `--sample 2` into `--samples 2`)."""

from __future__ import annotations

import pytest

from gym_runtime.cli.main import main


@pytest.mark.parametrize("argv", [["dry-run", "pkg", "--dataset", "rows.jsonl", "--fast"],
                                  ["dry-run", "pkg", "--dataset", "rows.jsonl", "--sample", "2"],
                                  ["up", "pkg", "--max-concurrent", "4"]])
def test_an_unknown_or_abbreviated_flag_is_a_usage_error_of_that_command(capsys, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    assert err.startswith(f"usage: gym-runtime {argv[0]} ") and "error[GR-USAGE]: unrecognized arguments:" in err
    assert f"hint: run `gym-runtime {argv[0]} --help`" in err
