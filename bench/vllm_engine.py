"""Bench the real vLLM engine the ``vllm`` tests use: prints figures, asserts nothing.

    ./uvw run python bench/vllm_engine.py [--cold] [--skip-model] [--completions 20]

Figures (docs/rollouts.md, "A real vLLM engine"): the vLLM venv (built with real uv by
``tests/helpers/vllm_engine.py``, or reused) and its size; ``--cold`` builds it again under an
empty ``XDG_CACHE_HOME`` of its own, which uv's cache follows too: a cold install, downloads
included (the ``torch +cpu`` wheel is a local file); the tiny model made from scratch by
``tests/helpers/vllm_model_maker.py`` (wall and CPU time, size); the engine with the tool and
reasoning parsers: time to ready, RSS and idle CPU; the median latency of one short turn (the
model's think block and "OK", at most 16 tokens) straight to the engine and through ``gym-runtime
up``'s built-in ``vllm_model``; the engine's stop after SIGTERM. Needs what the ``vllm`` tests need
(the ``torch +cpu`` wheel in ``PIP_FIND_LINKS``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.helpers import vllm_engine  # noqa: E402
from tests.helpers.environments import shared_venvs  # noqa: E402
from tests.helpers.vllm_engine import VLLMServer  # noqa: E402

TOOLS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3")
QUICKSTART = ROOT / "examples" / "native-quickstart"


def size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


def venv_figures(cold: bool) -> None:
    if os.environ.get("PIP_FIND_LINKS") and not os.environ.get("GYM_RUNTIME_TESTS_FIND_LINKS"):
        os.environ["GYM_RUNTIME_TESTS_FIND_LINKS"] = os.environ["PIP_FIND_LINKS"]
    if cold:
        with tempfile.TemporaryDirectory(prefix="vllm-bench-cache-") as cache:
            old = os.environ.get("XDG_CACHE_HOME")
            os.environ["XDG_CACHE_HOME"] = cache
            t0 = time.monotonic()
            venv = vllm_engine.vllm_venv()
            took = time.monotonic() - t0
            print(f"venv built cold (empty uv cache): {took:.1f} s, {size_mb(venv):.0f} MB")
            if old is None:
                os.environ.pop("XDG_CACHE_HOME")
            else:
                os.environ["XDG_CACHE_HOME"] = old
    t0 = time.monotonic()
    venv = vllm_engine.vllm_venv()
    print(f"venv ready: {time.monotonic() - t0:.1f} s (reused when already built), {size_mb(venv):.0f} MB")


def model_figures() -> None:
    python = vllm_engine.vllm_venv() / "bin" / "python"
    with tempfile.TemporaryDirectory(prefix="tiny-model-") as out:
        t0, cpu0 = time.monotonic(), sum(os.times()[2:4])
        done = subprocess.run(
            [str(python), str(vllm_engine.MAKER), out],
            capture_output=True,
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            check=True,
        )
        took = time.monotonic() - t0
        facts = json.loads(done.stdout.strip().splitlines()[-1])
        cpu = sum(os.times()[2:4]) - cpu0
        print(
            f"tiny model made: {took:.1f} s wall, {cpu:.1f} s CPU ({facts['seconds']} s after the imports, "
            f"{facts['parameters']} parameters, vocab {facts['vocab']}), {size_mb(Path(out)):.2f} MB"
        )


def median_ms(url: str, body: dict, n: int) -> float:
    times = []
    with httpx.Client(timeout=120, trust_env=False) as client:
        for _ in range(n):
            t0 = time.monotonic()
            client.post(url, json=body).raise_for_status()
            times.append((time.monotonic() - t0) * 1000)
    return statistics.median(times)


def up_figures(engine: VLLMServer, n: int, work: Path) -> None:
    env = {
        **os.environ,
        **shared_venvs(),
        "GYM_RUNTIME_POLICY_API_KEY": "EMPTY",
        "GYM_RUNTIME_HOME": str(work / "home"),
    }
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gym_runtime.cli.main",
            "up",
            str(QUICKSTART),
            "--work-dir",
            str(work / "up"),
            "--policy-base-url",
            engine.base_url,
            "--policy-model-name",
            engine.model,
            "--probe-policy",
            "policy_model.responses_api_models.vllm_model.uses_reasoning_parser=true",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        env=env,
    )
    try:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"up exited {proc.wait()} without a ready line (logs: {work / 'up'})")
        print(f"up --probe-policy ready against the engine: {time.monotonic() - t0:.1f} s")
        model = json.loads(line)["servers"]["policy_model"]
        body = {
            "input": [{"role": "user", "content": "Reply with the word OK."}],
            "temperature": 0,
            "max_output_tokens": 16,
        }
        took = median_ms(model + "/v1/responses", body, n)
        print(f"the same turn through the built-in vllm_model (/v1/responses): median {took:.0f} ms")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", action="store_true", help="also build the venv into an empty cache directory")
    parser.add_argument("--skip-model", action="store_true", help="do not make the tiny model again")
    parser.add_argument("--completions", type=int, default=20)
    args = parser.parse_args()
    venv_figures(args.cold)
    if not args.skip_model:
        model_figures()
    with tempfile.TemporaryDirectory(prefix="vllm-bench-") as tmp:
        work = Path(tmp)
        t0 = time.monotonic()
        engine = VLLMServer(work, TOOLS, 1024).__enter__()
        try:
            print(f"engine ready (tools and reasoning parsers): {time.monotonic() - t0:.1f} s")
            proc = psutil.Process(engine.proc.pid)
            tree = [proc, *proc.children(recursive=True)]
            print(f"engine RSS: {sum(p.memory_info().rss for p in tree) / 1e6:.0f} MB")
            cpu0 = sum(sum(p.cpu_times()[:2]) for p in tree)
            time.sleep(5)
            print(f"engine idle CPU: {(sum(sum(p.cpu_times()[:2]) for p in tree) - cpu0) / 5 * 100:.1f} %")
            body = {
                "model": engine.model,
                "messages": [{"role": "user", "content": "Reply with the word OK."}],
                "temperature": 0,
                "max_tokens": 16,
            }
            print(
                f"the OK turn (think block and reply, <= 16 tokens) straight to the engine: median "
                f"{median_ms(engine.base_url + '/chat/completions', body, args.completions):.0f} ms"
            )
            up_figures(engine, args.completions, work)
        finally:
            t0 = time.monotonic()
            engine.stop()
            print(f"engine stopped after SIGTERM: {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
