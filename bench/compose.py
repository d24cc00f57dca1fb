"""Composition figures: `validate` in-process against NeMo Gym's own parser on the same configs. Prints; asserts nothing.

    ./uvw run python bench/compose.py [--runs 5] [--version 0.7.0] [--configs a.yaml,b.yaml] [--gym]

For the bundled native example and each config of the ``nemo-gym`` wheel (default: the largest
benchmark bundles), bundled as a wheels-v1 package (``tests/helpers/gym_bundle.py``): the time of
``validate``'s checks after imports (``gym_runtime.cli.validate.collect``: package, composition,
resolution, instances, preflight; median and best of ``--runs``), and the import time of the CLI.
With ``--gym`` (needs PyPI once and a Python the release runs on): the import time of Gym's
``nemo_gym.global_config`` and its parse of each config, in one process
(``tests/helpers/gym_parser.py``). Targets (docs/environment-packages.md, "Composition"): the
bundled example under 0.5 s, the largest 0.7.0 benchmark config under 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.gym_bundle import POLICY, bundle_package, gym_wheel_of  # noqa: E402

LARGEST = [
    "benchmarks/gdpval/config.yaml",
    "benchmarks/browsecomp/config.yaml",
    "benchmarks/aime24/config.yaml",
    "environments/nemo_user_sim/config.yaml",
]


def collect_times(pkg: Path, runs: int) -> tuple[float, float]:
    from gym_runtime.cli import validate
    from gym_runtime.cli.parser import make_parser, parse_args

    args = parse_args(make_parser(), ["validate", str(pkg)])
    out = []
    for _ in range(runs + 1):
        t = time.perf_counter()
        validate.collect(args)
        out.append(time.perf_counter() - t)
    return statistics.median(out[1:]), min(out[1:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--version", default="0.7.0")
    ap.add_argument("--configs", default=",".join(LARGEST))
    ap.add_argument("--gym", action="store_true")
    a = ap.parse_args()
    imports = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time; t=time.perf_counter(); "
            "import gym_runtime.cli.validate, gym_runtime.config; print(time.perf_counter()-t)",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout.strip()
    print(f"imports (validate, config): {float(imports):.3f} s")
    med, best = collect_times(ROOT / "examples" / "native-quickstart", a.runs)
    print(f"validate examples/native-quickstart: median {med:.3f} s, best {best:.3f} s")
    wheel = gym_wheel_of(a.version)
    configs = [c for c in a.configs.split(",") if c]
    with tempfile.TemporaryDirectory() as tmp:
        pkgs = {c: bundle_package(wheel, c, Path(tmp) / str(i)) for i, c in enumerate(configs)}
        for c, pkg in pkgs.items():
            files = sum(1 for p in pkg.rglob("*.yaml"))
            med, best = collect_times(pkg, a.runs)
            print(
                f"validate {c} ({a.version}, {files} YAML files in the package): median {med:.3f} s, best {best:.3f} s"
            )
        if a.gym:
            from tests.helpers.gym_parser import GymParser, parser_venv

            venv = parser_venv(a.version)
            if venv is None:
                print("no Python for Gym's parser")
                return
            out = subprocess.run(
                [
                    str(venv / "bin/python"),
                    "-c",
                    "import time; t=time.perf_counter(); import nemo_gym.global_config; print(time.perf_counter()-t)",
                ],
                capture_output=True,
                text=True,
            ).stdout.strip()
            print(f"Gym {a.version}: import nemo_gym.global_config {float(out):.3f} s")
            values = {"policy_base_url": "http://127.0.0.1:8000/v1", "policy_api_key": "k", "policy_model_name": "m"}
            with GymParser(venv) as parser:
                for c, pkg in pkgs.items():
                    parser.parse(pkg, [POLICY, c], values)
                    t = time.perf_counter()
                    answer = parser.parse(pkg, [POLICY, c], values)
                    print(
                        f"Gym {a.version}: parse {c}: {time.perf_counter() - t:.3f} s "
                        f"({'ok' if 'config' in answer else answer.get('error')})"
                    )


if __name__ == "__main__":
    main()
