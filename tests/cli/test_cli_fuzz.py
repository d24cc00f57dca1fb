"""Property test: generated manifests and configs never make the CLI print a traceback or exit other than 0/1.

700 generated packages in CI (random YAML-ish structures, bad types, odd keys, deep
nesting, non-UTF-8 bytes, huge integers, anchors and aliases, interpolations) go through
``validate`` and ``config`` in-process (``gym_runtime.cli.main.main``), stdout/stderr captured.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from tests.helpers.fuzz_packages import package, run_cli, write_package

EXAMPLES = 700  # bench/fuzz.py runs 10,000 (docs/reliability.md)


def test_cli_never_tracebacks_on_generated_packages(monkeypatch) -> None:
    monkeypatch.delenv("GR_FUZZ_UNSET", raising=False)
    for k in ("GYM_RUNTIME_POLICY_BASE_URL", "GYM_RUNTIME_POLICY_API_KEY", "GYM_RUNTIME_POLICY_MODEL_NAME"):
        monkeypatch.delenv(k, raising=False)
    base = Path(tempfile.mkdtemp(prefix="gr-fuzz-"))
    seen = {"n": 0, "ok": 0}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )
    @given(case=package())
    def check(case: dict) -> None:
        seen["n"] += 1
        root = base / "pkg"
        shutil.rmtree(root, ignore_errors=True)
        write_package(root, case)
        flags = [x for f in case["flags"] for x in f]
        js = ["--json"] if case["json"] else []
        cfg_flags = [x for x in flags if x not in ("--platform", "linux/arm64")]
        for argv in (["validate", *js, str(root), *flags], ["config", *js, str(root), *case["overrides"], *cfg_flags]):
            code, text = run_cli(argv)
            assert code in (0, 1), (argv, code, text[-2000:])
            assert "Traceback" not in text, text[-3000:]
            seen["ok"] += code == 0

    try:
        check()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert seen["n"] >= EXAMPLES and seen["ok"] > 0
