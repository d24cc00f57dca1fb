"""A tiny stand-in for Prime Intellect's ``verifiers`` (v0.1.14 interface) and one environment.

The real ``verifiers`` needs ``datasets``, ``anthropic``, ``mcp``, ``prime-sandboxes`` and more,
and Gym pins it from git; tests instead install these two real wheels, built here, into a venv
with real uv and no index (as stage 2 installs a package's vendored ``wheels/``):

- ``verifiers`` 0.1.14: ``load_environment(env_id, **args)`` (module = ``env_id`` with ``-`` -> ``_``,
  last ``/`` part; ``ValueError`` when it cannot be imported, as the real one) and ``Environment``
  whose ``run_group`` asks the client (``client.chat.completions.create``) once per input, scores
  the answer with the environment's rubric and returns outputs with ``completion``, ``reward``,
  ``metrics`` and ``trajectory[].tokens``.
- ``tiny-arith`` 0.1.0 (module ``tiny_arith``): reward 1.0 when the last number of the reply
  equals the row's ``answer`` (or ``float(fixed_reward)`` when that environment argument is given,
  e.g. ``"nan"``, to test how an unusable reward is reported).
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import uv

VERIFIERS_INIT = """
import importlib
import re

RolloutInput = dict


class Environment:
    def __init__(self, rubric, system_prompt=None):
        self.rubric = rubric
        self.system_prompt = system_prompt
        self.env_id = None
        self.env_args = None

    async def run_group(self, group_inputs, client, model, sampling_args, max_retries=0, state_columns=None, **kw):
        outputs = []
        for item in group_inputs:
            messages = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else [])
            messages += list(item["prompt"])
            reply = await client.chat.completions.create(model=model, messages=messages, **sampling_args)
            message = reply.choices[0].message
            completion = [{"role": "assistant", "content": message.content or ""}]
            tokens = None
            if getattr(message, "generation_token_ids", None) is not None:
                tokens = {"prompt_ids": message.prompt_token_ids, "completion_ids": message.generation_token_ids,
                          "completion_logprobs": message.generation_log_probs}
            reward = float(self.rubric(completion, item.get("answer", "")))
            outputs.append({"example_id": item.get("example_id", 0), "prompt": item["prompt"],
                            "completion": completion, "reward": reward, "metrics": {"correct": reward},
                            "is_completed": True, "is_truncated": False,
                            "trajectory": [{"prompt": messages, "completion": completion, "tokens": tokens}]})
        return outputs


def load_environment(env_id, **env_args):
    module_name = env_id.replace("-", "_").split("/")[-1]
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"Could not import '{env_id}' environment.") from e
    env = module.load_environment(**env_args)
    env.env_id, env.env_args = env_id, env_args
    return env
"""

TINY_ARITH_INIT = """
import re

import verifiers as vf


def load_environment(system_prompt="Answer with a number.", fixed_reward=None):
    def rubric(completion, answer):
        if fixed_reward is not None:
            return fixed_reward
        numbers = re.findall(r"-?\\d+(?:\\.\\d+)?", completion[-1]["content"])
        return 1.0 if numbers and answer and float(numbers[-1]) == float(answer) else 0.0

    return vf.Environment(rubric=rubric, system_prompt=system_prompt)
"""


def write_module_wheel(directory: Path, dist: str, version: str, module: str, init_source: str) -> Path:
    """A pure-Python wheel with one package ``module`` whose ``__init__.py`` is ``init_source``."""
    normalized = dist.replace("-", "_")
    dist_info = f"{normalized}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": init_source,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{normalized}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr(f"{dist_info}/RECORD", "".join(f"{n},,\n" for n in files) + f"{dist_info}/RECORD,,\n")
    return path


def make_wheels(directory: Path) -> Path:
    """Write the ``verifiers`` and ``tiny-arith`` wheels into ``directory``."""
    write_module_wheel(directory, "verifiers", "0.1.14", "verifiers", VERIFIERS_INIT)
    write_module_wheel(directory, "tiny-arith", "0.1.0", "tiny_arith", TINY_ARITH_INIT)
    return directory


def make_venv(root: Path, wheels: Path | None, packages: list[str]) -> Path:
    """A venv (real uv) that sees the project's site-packages (fastapi, openai, ...) through a
    ``.pth`` file and has ``packages`` installed from ``wheels`` with no index; returns its python."""
    uv_bin = uv.find_uv_bin()
    subprocess.run([uv_bin, "venv", "--quiet", "--python", sys.executable, str(root)], check=True)
    python = root / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "project_env.pth").write_text(sysconfig.get_path("purelib") + "\n")
    if packages:
        subprocess.run(
            [
                uv_bin,
                "pip",
                "install",
                "--quiet",
                "--python",
                str(python),
                "--no-index",
                "--find-links",
                str(wheels),
                *packages,
            ],
            check=True,
        )
    return python
