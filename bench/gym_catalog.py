"""Catalog sweep: trees of a ``nemo-gym`` wheel under ``gym-runtime``, one at a time; prints
figures, asserts nothing.

    ./uvw run python bench/gym_catalog.py WHEEL [--python PY] [--trees tree[:config.yaml],...]
                                          [--isolation LEVEL] [--json OUT.json] [--markdown OUT.md]

``WHEEL`` is a ``nemo_gym-X.Y.Z-py3-none-any.whl`` (PyPI's); its release picks the tree list
(:data:`TREES` for 0.4, :data:`TREES_07` from 0.5 on), the pins (``GYM_RUNTIME_PIN_NEMO_GYM`` =
the wheel's release, ``openai`` at the release's default, docs/runtime.md "Gym releases") and the
server Python (``--python``, else one the release accepts, ``tests/helpers/gym_package.py``).
For each tree: package it unchanged with every tree its config names and ``vllm_model``
(``assemble_tree_package``), ``validate``, ``build``, ``up`` with the built-in stub model as policy,
POST the tree's first example row through ``/rollouts/run`` (to the agent its config defines unless
the row names its own route), then SIGTERM. One line per tree: the stage reached, the seconds each
stage took, the isolation level, the HTTP status of the agent's ``/run``, the reward, and whose fault
a failure is (``ours``, ``tree``, ``network``: more than PyPI, all this host reaches, ``key``: a
secret the operator did not pass, ``gpu``, ``host``: this machine's load or limits): an analysed
verdict from :data:`VERDICTS` when one matches the
error code, else a first guess from the code (marked ``?``). Then a summary. Trees run one at a
time (each builds venvs: CPU-heavy); venvs are shared with the tests' cache, so a second sweep
mostly reuses them. Needs PyPI.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

import httpx
import yaml
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gym_runtime.gym_release import known_release  # noqa: E402
from tests.helpers.gym_package import assemble_tree_package, cache_dir, release_python, wheel_version  # noqa: E402

# (tree, config): no GPU, no paid API (every model reference is the policy model), CPU-only deps.
TREES = [
    ("example_single_tool_call", "example_single_tool_call.yaml"),
    ("example_multi_step", "example_multi_step.yaml"),
    ("example_session_state_mgmt", "example_session_state_mgmt.yaml"),
    ("example_tool_call_multireward", "example_tool_call_multireward.yaml"),
    ("example_multi_turn_gymnasium", "example_multi_turn_gymnasium.yaml"),
    ("arc_agi", "arc_agi.yaml"),
    ("calendar", "calendar.yaml"),
    ("structured_outputs", "structured_outputs_json.yaml"),
    ("reasoning_gym", "reasoning_gym.yaml"),
    ("math_with_code", "math_with_code.yaml"),
    ("workplace_assistant", "workplace_assistant.yaml"),
    ("xlam_fc", "xlam_fc.yaml"),
    ("mcqa", "mcqa.yaml"),
    ("math_with_judge", "math_with_judge.yaml"),
    ("grl_sokoban", "grl_sokoban.yaml"),
    ("grl_tetris", "grl_tetris.yaml"),
    ("code_gen", "code_gen.yaml"),
    ("newton_bench", "newton_bench.yaml"),
    ("ifbench", "ifbench.yaml"),
    ("equivalence_rule", "lc.yaml"),
    ("blackjack", "blackjack.yaml"),
    ("gymnasium", "gymnasium.yaml"),
    ("gpqa_diamond", "gpqa_diamond.yaml"),
    ("competitive_coding_challenges", "competitive_coding_challenges.yaml"),
    ("text_to_sql", "text_to_sql.yaml"),
    ("scicode", "scicode.yaml"),
    ("spider2_lite", "spider2_lite.yaml"),
    ("circle_count", "circle_count.yaml"),
    ("single_step_tool_use_with_argument_comparison", "single_step_tool_use_with_argument_comparison.yaml"),
]

# 0.5 and later (swept on 0.7.0): a spread of kinds, cheapest first. Single-tool and multi-step examples,
# an environment server of the tree's own (single_agent_turn_legacy, nemo_user_sim), MCP, multi-turn
# games, code execution and trees declaring ``ray_enabled = True`` (code_gen, evalplus, code_fim,
# spider2_lite), math verifiers, ``overrides.txt`` (toolsandbox), keys (frontierscience_judge,
# tavily_search), git requirements and data fetched at start-up (finance_agent_v2, nemo_user_sim,
# newton_bench, instruction_following).
TREES_07 = [
    ("example_single_tool_call", "example_single_tool_call.yaml"),
    ("example_single_tool_call", "example_single_tool_call_single_agent_turn.yaml"),
    ("example_multi_step", "example_multi_step.yaml"),
    ("example_session_state_mgmt", "example_session_state_mgmt.yaml"),
    ("example_tool_call_multireward", "example_tool_call_multireward.yaml"),
    ("example_multi_turn_gymnasium", "example_multi_turn_gymnasium.yaml"),
    ("example_mcp_weather", "example_mcp_weather.yaml"),
    ("workplace_assistant", "workplace_assistant.yaml"),
    ("xlam_fc", "xlam_fc.yaml"),
    ("blackjack", "blackjack.yaml"),
    ("gpqa_diamond", "gpqa_diamond.yaml"),
    ("text_to_sql", "text_to_sql.yaml"),
    ("circle_count", "circle_count.yaml"),
    ("wordle", "wordle.yaml"),
    ("arc_agi", "arc_agi.yaml"),
    ("calendar", "calendar.yaml"),
    ("code_gen", "code_gen.yaml"),
    ("evalplus", "evalplus.yaml"),
    ("code_fim", "code_fim.yaml"),
    ("spider2_lite", "spider2_lite.yaml"),
    ("math_with_code", "math_with_code.yaml"),
    ("mcqa", "mcqa.yaml"),
    ("math_with_judge", "math_with_judge.yaml"),
    ("structured_outputs", "structured_outputs_json.yaml"),
    ("toolsandbox", "toolsandbox.yaml"),
    ("string_match", "string_match.yaml"),
    ("grl_sokoban", "grl_sokoban.yaml"),
    ("frontierscience_judge", "frontierscience_judge.yaml"),
    ("tavily_search", "tavily_search_judge_vllm_model.yaml"),
    ("finance_agent_v2", "finance_agent_v2.yaml"),
    ("nemo_user_sim", "nemo_user_sim.yaml"),
    ("instruction_following", "instruction_following.yaml"),
    ("newton_bench", "newton_bench.yaml"),
    ("reasoning_gym", "reasoning_gym.yaml"),
]

# Analysed failures: (tree, error code) -> (fault, why). Anything else gets a guess from GUESS.
VERDICTS: dict[tuple[str, str], tuple[str, str]] = {
    ("grl_sokoban", "GR-ROLLOUT-HTTP"): (
        "tree",
        "an answer without `<action>...</action>` is a 400 from the tree's "
        "/step, which its agent turns into a 500 (the stub answers in prose)",
    ),
    ("grl_tetris", "GR-ROLLOUT-HTTP"): (
        "tree",
        "an answer without `<action>...</action>` is a 400 from the tree's "
        "/step, which its agent turns into a 500 (the stub answers in prose)",
    ),
    ("newton_bench", "GR-START-CRASH"): (
        "tree",
        "clones NewtonBench from GitHub at start-up into its install "
        "directory (the venv's site-packages): read-only in the sandbox, and egress "
        "is denied; the start error says the write was refused",
    ),
    ("ifbench", "GR-BUILD-UV"): (
        "host",
        "its requirements.txt installs a wheel from github.com; this host reaches PyPI only (uv's words: dns error)",
    ),
    ("equivalence_rule", "GR-ROLLOUT-HTTP"): (
        "tree",
        "its example rows carry `metadata: null`, which Gym's own "
        "vllm_model rejects (AttributeError), as under NeMo Gym's launcher",
    ),
    ("gymnasium", "GR-START-CRASH"): (
        "tree",
        "a base class (its config: 'Not a standalone server'): base.py defines classes and exits 0",
    ),
    ("competitive_coding_challenges", "GR-START-TIMEOUT"): (
        "tree",
        "loads ~27 GB of test metadata at start-up "
        "(data/test_metadata.jsonl, CCC_TEST_FILE), which a "
        "package cannot hold",
    ),
    ("scicode", "GR-ROLLOUT-HTTP"): (
        "tree",
        "verify needs SciCode's test_data.h5 staged and test_data_fpath set (RuntimeError from the tree's /verify)",
    ),
    ("spider2_lite", "GR-START-CRASH"): (
        "tree",
        "downloads its SQLite databases from Google Drive at start-up into "
        "its server directory: read-only in the sandbox, and egress is denied",
    ),
    ("single_step_tool_use_with_argument_comparison", "GR-ROLLOUT-HTTP"): (
        "tree",
        "its example rows carry `metadata: null`, which Gym's own vllm_model rejects (AttributeError)",
    ),
}
# The 0.7.0 sweep's, looked up first for a wheel of 0.5 or later. Faults: ``network`` (needs more
# than PyPI, which is all this host reaches), ``key`` (a secret the operator did not pass), ``gpu``.
VERDICTS_07: dict[tuple[str, str], tuple[str, str]] = {
    ("example_mcp_weather", "GR-CONFIG-INTERPOLATION"): (
        "key",
        "its agent is `claude_code_agent` (Claude Code against Anthropic's API): `anthropic_api_key` is unset, "
        "and `validate` names it; with a key it would still need api.anthropic.com, which this host cannot reach",
    ),
    ("wordle", "GR-ROLLOUT-HTTP"): (
        "network",
        "its word lists (`data/guesses.txt`) are made by the tree's `generate_data.py`, which downloads a "
        "dictionary from GitHub; the wheel ships none, so `/step` raises FileNotFoundError (its agent's 500)",
    ),
    ("evalplus", "GR-START-EGRESS"): (
        "network",
        "downloads the HumanEval+ problems from GitHub at start-up; the start error names the hosts the "
        "sandbox denied (`Tunnel connection failed: 403`)",
    ),
    ("code_fim", "GR-START-CRASH"): (
        "tree",
        "its pyproject.toml asks for `human-eval-infilling`, whose only PyPI release (2.15.0) is an empty "
        "placeholder: `import human_eval_infilling` fails at start-up, as under NeMo Gym's launcher",
    ),
    ("spider2_lite", "GR-START-CRASH"): (
        "network",
        "downloads its SQLite databases from Google Drive at start-up into its server directory: egress "
        "is denied, and the directory is read-only in the sandbox",
    ),
    ("tavily_search", "GR-CONFIG-INTERPOLATION"): (
        "key",
        "`tavily_api_key` (Tavily's search API) and its judge's `search_judge_model_*` are unset; `validate` "
        "names the first; with them it would still need api.tavily.com, which this host cannot reach",
    ),
    ("frontierscience_judge", "GR-CONFIG-NULL"): (
        "key",
        "`NVIDIA_API_KEY` is unset, so its judge's `openai_api_key` (`${judge_api_key}`, "
        "`${oc.env:NVIDIA_API_KEY,null}`) is null where the tree's `openai_model` config class declares `str`; "
        "`validate` names the variable; with a key, integrate.api.nvidia.com is still out of this host's reach",
    ),
    ("finance_agent_v2", "GR-BUILD-UV"): (
        "network",
        "its requirements.txt installs `finance-agent` from GitHub (git+https); this host reaches PyPI only "
        "(the build error carries git's words: Could not resolve host: github.com)",
    ),
    ("nemo_user_sim", "GR-BUILD-UV"): (
        "network",
        "its requirements.txt installs `nemo-usersim` from GitHub (git+https); this host reaches PyPI only",
    ),
    ("instruction_following", "GR-BUILD-UV"): (
        "network",
        "its requirements.txt installs `verifiable-instructions` from GitHub (git+https); this host reaches PyPI only",
    ),
    ("newton_bench", "GR-START-CRASH"): (
        "network",
        "clones NewtonBench from GitHub at start-up into its install directory: egress is denied, and the "
        "venv is read-only in the sandbox; the start error says the write was refused",
    ),
}
GUESS = [
    ("GR-START-EGRESS", "network"),
    ("GR-BUILD-PYTHON", "host"),
    ("GR-SANDBOX", "host"),
    ("GR-START-PORT", "host"),
    ("GR-DAEMON", "host"),
    ("GR-START-TIMEOUT", "host"),
    ("GR-BUILD", "tree"),
    ("GR-ROLLOUT", "tree"),
    ("GR-START-CRASH", "tree"),
    ("GR-PKG", "ours"),
    ("GR-CONFIG", "ours"),
    ("GR-INTERNAL", "ours"),
]


def gym_env(version: str) -> dict[str, str]:
    """The pins of a sweep of release ``version``: that SDK and the openai it defaults to."""
    return {
        "GYM_RUNTIME_PIN_NEMO_GYM": version,
        "GYM_RUNTIME_PIN_OPENAI": known_release(version).default_openai,
        "GYM_RUNTIME_PIN_MODE": "gym",
    }


@dataclass
class Result:
    """One tree's sweep: ``stage`` is the stage that failed, or ``ok`` when the row was answered and
    the daemon stopped cleanly; seconds per stage (the daemon is stopped after a failed row too);
    the agent's HTTP status and reward."""

    tree: str
    config: str
    stage: str = "package"
    seconds: dict[str, float] = field(default_factory=dict)
    http: int | None = None
    reward: float | None = None
    code: str | None = None
    detail: str = ""
    fault: str | None = None
    stop_exit: int | None = None
    isolation: str | None = None
    servers: int | None = None

    def line(self) -> str:
        secs = " ".join(f"{k}={v:.0f}s" for k, v in self.seconds.items())
        reward = "-" if self.reward is None else f"{self.reward:g}"
        verdict = f"fault={self.fault}" if self.fault else ""
        return (
            f"{self.tree:<46} {self.stage:<8} {secs:<52} servers={self.servers or '-'} "
            f"isolation={self.isolation or '-'} http={self.http or '-'} reward={reward} "
            f"{self.code or ''} {verdict} {self.detail[:160]}"
        ).rstrip()


def _cli(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def _error_of(text: str) -> tuple[str | None, str]:
    """``(code, message)`` of a command's JSON error object (an invalid package: its first problem)
    or else of its first error block (``error[CODE]: ...``)."""
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[text.index("{") :])
        err = doc.get("error") if isinstance(doc, dict) else None
    except ValueError:
        err = None
    if isinstance(err, dict):
        first = next(iter(err.get("violations") or []), None)
        if first:  # an invalid package: its first problem is the one worth a table cell
            return first.get("code"), f"{first.get('key') or first.get('file')}: {first.get('message')}"
        return err.get("code"), str(err.get("message", ""))
    m = re.search(r"error\[(GR-[A-Z0-9-]+)\]: (.*)", text)
    if m:
        return m.group(1), m.group(2).strip()
    return None, text.strip().splitlines()[-1] if text.strip() else ""


def agents_of(pkg: Path, tree: str, config: str) -> list[str]:
    """The agent instances the tree's config defines, in its order."""
    doc = yaml.safe_load((pkg / "resources_servers" / tree / "configs" / config).read_text()) or {}
    return [name for name, inst in doc.items() if isinstance(inst, dict) and "responses_api_agents" in inst]


def judge(res: Result, version: str) -> None:
    """Fill ``res.fault`` from :data:`VERDICTS` (:data:`VERDICTS_07` first from 0.5 on), else from
    the code (a guess, marked ``?``)."""
    if res.stage == "ok" or res.code is None:
        return
    known = (VERDICTS_07.get((res.tree, res.code)) if Version(version) >= Version("0.5") else None) or VERDICTS.get(
        (res.tree, res.code)
    )
    if known:
        res.fault, res.detail = known[0], known[1]
        return
    guess = next((fault for prefix, fault in GUESS if res.code.startswith(prefix)), "ours")
    res.fault = guess + "?"


def routed(row: dict, agents: list[str]) -> bool:
    """True when a row names its own route (docs/rollouts.md, "Rows through environment servers"):
    an agent of this config, a ``task_source`` or an environment server (an ``agent_ref`` naming
    an agent of another config of the tree is replaced by this config's agent)."""
    named = (row.get("agent_ref") or {}).get("name") if isinstance(row.get("agent_ref"), dict) else None
    return named in agents or any(k in row for k in ("task_source", "_ng_environment_server"))


def sweep_one(wheel: Path, tree: str, config: str, python: str, work: Path, isolation: str | None) -> Result:
    res = Result(tree, config)
    env = {
        **os.environ,
        **gym_env(wheel_version(wheel)),
        "GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs"),
        "GYM_RUNTIME_HOME": str(work / "home"),
    }
    t = time.monotonic()
    pkg, rows = assemble_tree_package(wheel, tree, config, work / "pkg")
    agents = agents_of(pkg, tree, config)
    res.seconds["package"] = time.monotonic() - t
    for stage, args, timeout in (
        ("validate", ["validate", str(pkg), "--json"], 300),
        ("build", ["build", str(pkg), "--python", python, "--json"], 3600),
    ):
        res.stage = stage
        t = time.monotonic()
        done = _cli(*args, env=env, timeout=timeout)
        res.seconds[stage] = time.monotonic() - t
        if done.returncode != 0:
            res.code, res.detail = _error_of(done.stdout + "\n" + done.stderr)
            return res
    res.stage = "up"
    t = time.monotonic()
    argv = [
        sys.executable,
        "-m",
        "gym_runtime.cli.main",
        "up",
        str(pkg),
        "--work-dir",
        str(work / "run"),
        "--python",
        python,
        "--shutdown-grace",
        "15",
        *(["--isolation", isolation] if isolation else []),
    ]
    err_path = work / "up.stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env, start_new_session=True)
        try:
            line = proc.stdout.readline() if proc.stdout else ""
            res.seconds["up"] = time.monotonic() - t
            if not line:
                proc.wait(60)
                res.code, res.detail = _error_of(err_path.read_text())
                return res
            info = json.loads(line)
            res.isolation, res.servers = info.get("isolation"), len(info.get("servers") or [])
            res.stage = "row"
            row = rows[0] if rows else {"responses_create_params": {"input": "Hello"}}
            if not routed(row, agents):
                row = {**row, "agent_ref": {"type": "responses_api_agents", "name": agents[0] if agents else None}}
            t = time.monotonic()
            r = httpx.post(
                info["head_server"] + "/rollouts/run", json={"examples": [row]}, timeout=900, trust_env=False
            )
            res.seconds["row"] = time.monotonic() - t
            (out,) = json.loads(r.text)["results"]
            if "error" in out:
                res.code, res.detail = out["error"].get("code"), out["error"].get("message", "")
                m = re.search(r"answered (\d{3})", res.detail)
                res.http = int(m.group(1)) if m else None
            else:
                res.http, res.reward = 200, out.get("reward")
            res.stage = "row" if res.code else "stop"
            t = time.monotonic()
            os.kill(proc.pid, signal.SIGTERM)
            res.stop_exit = proc.wait(60)
            res.seconds["stop"] = time.monotonic() - t
            if res.code is None and res.stop_exit == 0:
                res.stage = "ok"
            elif res.code is None:
                res.code, res.detail = "stop", f"exit {res.stop_exit}"
        except (subprocess.TimeoutExpired, httpx.HTTPError, ValueError) as e:
            res.code, res.detail = res.code or "bench", f"{type(e).__name__}: {e}"
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait(10)
    return res


def versions(python: str, version: str) -> dict[str, str]:
    py = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "gym-runtime": metadata.version("gym-runtime"),
        "nemo-gym": version,
        "server python": py,
        "ray": os.environ.get("GYM_RUNTIME_PIN_RAY", metadata.version("ray")),
        "openai pin": gym_env(version)["GYM_RUNTIME_PIN_OPENAI"],
        "uv": metadata.version("uv"),
        "host": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
    }


def markdown(results: list[Result], info: dict[str, str]) -> str:
    head = (
        "| tree (config) | stage (failed) | validate | build | up | servers (isolation) | row | stop | HTTP | "
        "reward | fault | notes |\n"
    )
    head += "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    body = ""
    for r in results:
        s = [f"{r.seconds[k]:.0f} s" if k in r.seconds else "" for k in ("validate", "build", "up", "row", "stop")]
        s.insert(3, f"{r.servers} ({r.isolation})" if r.servers else "")
        reward = "" if r.reward is None else f"{r.reward:g}"
        note = (f"`{r.code}` " if r.code else "") + r.detail.replace("|", "\\|")[:200]
        body += (
            f"| {r.tree} (`{r.config}`) | {r.stage} | {' | '.join(s)} | {r.http or ''} | {reward} | "
            f"{r.fault or ''} | {note.strip()} |\n"
        )
    meta = ", ".join(f"{k} {v}" for k, v in info.items())
    return f"{time.strftime('%Y-%m-%d')}; {meta}\n\n{head}{body}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("wheel", type=Path, help="the nemo_gym-X.Y.Z-py3-none-any.whl whose trees are swept")
    ap.add_argument("--python", help="interpreter for server venvs (default: one the wheel's release accepts)")
    ap.add_argument("--trees", help="comma list of tree[:config.yaml] (default: the catalog list)")
    ap.add_argument("--isolation", choices=["full", "partial", "none"])
    ap.add_argument("--json", type=Path, help="write every result as JSON here")
    ap.add_argument("--markdown", type=Path, help="write the table (with date and versions) here")
    ap.add_argument("--keep", type=Path, help="keep each tree's package, run dir and logs under this directory")
    ap.add_argument(
        "--render",
        type=Path,
        nargs="+",
        help="judge the results of earlier --json files again (after "
        "VERDICTS changed; a later file's tree:config replaces an earlier one's) and print / write them, "
        "running nothing",
    )
    args = ap.parse_args()
    version = wheel_version(args.wheel)
    python = args.python or release_python(version)
    if python is None:
        sys.exit(
            f"no Python for nemo-gym {version} (Requires-Python {known_release(version).requires_python}): "
            "give one with --python"
        )
    default = TREES if Version(version) < Version("0.5") else TREES_07
    trees = (
        default
        if not args.trees
        else [(t.split(":")[0], t.split(":")[1] if ":" in t else f"{t}.yaml") for t in args.trees.split(",")]
    )
    info = versions(python, version)
    print("versions:", json.dumps(info), flush=True)
    results: list[Result] = []
    if args.render:
        trees = []
        merged = {(d["tree"], d["config"]): d for f in args.render for d in json.loads(f.read_text())}
        for d in merged.values():
            results.append(Result(**{**d, "fault": None}))
            judge(results[-1], version)
            print(results[-1].line(), flush=True)
    for tree, config in trees:
        with tempfile.TemporaryDirectory(prefix=f"gr-catalog-{tree[:20]}-") as tmp:
            work = args.keep / f"{tree}-{Path(config).stem}" if args.keep else Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            try:
                res = sweep_one(args.wheel, tree, config, python, work, args.isolation)
            except Exception as e:  # a bench must go on with the next tree; the line says what broke
                res = Result(tree, config, code="bench", detail=f"{type(e).__name__}: {e}")
        judge(res, version)
        results.append(res)
        print(res.line(), flush=True)
        if args.json:
            args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    ok = [r for r in results if r.stage == "ok"]
    by_fault: dict[str, list[str]] = {}
    for r in results:
        if r.stage != "ok":
            by_fault.setdefault(r.fault or "?", []).append(r.tree)
    faults = "; ".join(f"{f}: {', '.join(ts)}" for f, ts in sorted(by_fault.items()))
    print(
        f"summary: {len(ok)}/{len(results)} trees answered a row and stopped cleanly"
        + (f"; {faults}" if faults else ""),
        flush=True,
    )
    if args.markdown:
        args.markdown.write_text(markdown(results, info))


if __name__ == "__main__":
    main()
