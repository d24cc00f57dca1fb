"""Venv build figures: cold build, warm rebuild, venvs built. Prints; asserts nothing.

    ./uvw run python bench/build.py [--example examples/native-quickstart] [--servers 20]

1. a 20-server package whose servers share one requirements set (tiny wheels on a ``file://``
   index, no PyPI): cold build (empty venv root, warm uv cache), warm rebuild, venvs built;
2. the bundled example (needs PyPI for fastapi/uvicorn/...; skipped when unreachable):
   cold build with a warm uv cache, then the warm rebuild (target < 1 s, nothing reinstalled).
Each timing covers plan_venvs + build_venvs, as the daemon calls them.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gym_runtime.cli.validate import PLACEHOLDERS  # noqa: E402
from gym_runtime.config import build_config  # noqa: E402
from gym_runtime.package import check_package  # noqa: E402
from gym_runtime.settings import load_settings  # noqa: E402
from gym_runtime.venvs import build_venvs, plan_venvs  # noqa: E402
from tests.helpers.index import write_simple_index  # noqa: E402
from tests.helpers.registry import registry_reachable  # noqa: E402
from tests.helpers.wheels import build_wheel  # noqa: E402
from tests.venvs.conftest import synthetic_pkg  # noqa: E402


def _settings(home: Path, cache: Path, index: str | None):
    env = {k: v for k, v in os.environ.items() if not (index and k.startswith("UV_"))}
    env.update({"GYM_RUNTIME_HOME": str(home), "GYM_RUNTIME_UV_CACHE_DIR": str(cache)})
    if index:
        env["UV_INDEX_URL"] = index
    return load_settings(env)


def _timed(root: Path, settings, builtin: Path | None = None) -> tuple[float, int, int, int]:
    pkg, _ = check_package(root)
    assert pkg is not None
    t0 = time.perf_counter()
    merged = build_config(pkg, [], defaults=PLACEHOLDERS, **({"builtin_root": builtin} if builtin else {}))
    plan = plan_venvs(merged, settings)
    venvs = build_venvs(plan, settings)
    return time.perf_counter() - t0, len(plan.by_instance), len(venvs.venvs), venvs.built


def _report(title: str, root: Path, index: str | None, tmp: Path, builtin: Path | None = None) -> None:
    cache = tmp / f"cache-{title}"
    _timed(root, _settings(tmp / f"warmup-{title}", cache, index), builtin)  # warm the uv cache only
    settings = _settings(tmp / f"home-{title}", cache, index)
    cold, servers, venvs, built = _timed(root, settings, builtin)
    warm, _, _, rebuilt = _timed(root, settings, builtin)
    print(
        f"{title}: {servers} servers -> {venvs} venv(s); cold build (warm uv cache) {cold:.2f}s, "
        f"built {built}; warm rebuild {warm:.3f}s, rebuilt {rebuilt}"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--example", default=str(Path(__file__).resolve().parents[1] / "examples" / "native-quickstart"))
    ap.add_argument("--servers", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-build-") as d:
        tmp = Path(d)
        files = tmp / "files"
        build_wheel(files, "tinyparse", "0.3.0")
        build_wheel(files, "judgekit", "1.0.0", requires=["tinyparse>=0.3"])
        index = write_simple_index(files, tmp / "index")
        pkg = synthetic_pkg(
            tmp / "pkg20", {f"srv{i}": ("resources_servers", "judgekit==1.0.0\n") for i in range(args.servers)}
        )
        _report(f"{args.servers}-server package", pkg, index, tmp, builtin=tmp / "none")
        if registry_reachable():
            _report(f"example {Path(args.example).name}", Path(args.example), None, tmp)
        else:
            print(f"example {Path(args.example).name}: skipped (PyPI unreachable)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
