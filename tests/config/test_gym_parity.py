"""Parity: `gym-runtime config --json` against NeMo Gym's own parser, on real configs of each release's wheel.

For each config below (resources-server configs, their typed ``single_agent_turn`` variant,
``environments/NAME/config.yaml`` and ``benchmarks/NAME/config.yaml`` bundles) a wheels-v1 package
is bundled from the wheel (:mod:`tests.helpers.gym_bundle`: the config, what its nested
``config_paths`` reach, the trees they name, the wheel vendored), then both parse it: NeMo Gym's
``GlobalConfigDictParser`` of that release (one process per release, :mod:`tests.helpers.gym_parser`)
and ``gym-runtime config --json``. Compared: the set of server instances (every server type of
the release) and every resolved server block, except ``host`` / ``port`` (Gym fills them; the
runtime allocates ports at start), values the runtime masks (``****``: secrets), and the
differences docs/environment-packages.md ("Composition", "Differences from Gym's parser") lists
with their reasons (:data:`KNOWN`). ``REFUSED`` configs are ones Gym refuses: ours must refuse
them too. Both sides get the same environment, in which every variable behind a
``${oc.env:VAR,null}`` default in the wheel's configs has a value (:func:`key_variables`): unset,
it gives null where the servers' config classes want a string, which gym-runtime refuses before
anything starts (``GR-CONFIG-NULL``, tests/config/test_null_fields.py) and Gym's server at
start-up; Gym's parser lets it through. A config refused with ``GR-CONFIG-NULL`` alone (a null
placeholder such as ``judge_base_url: null``) passes when Gym's parser gives null at every key named.
Cost: one parser venv per release, built once and cached (0.7.0: ~350 MB, ~1 min from
PyPI; 0.4.0: the full install other tests share), one parser process each; ~0.2 s per config.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gym_runtime.cli.main import main
from gym_runtime.gym_release import release_for
from gym_runtime.package.layout import SERVER_TYPES as SERVER_TYPES_RUN  # the server types the runtime runs
from tests.helpers.gym_bundle import POLICY, bundle_package, gym_wheel_of
from tests.helpers.gym_parser import GymParser, parser_python, parser_venv

pytestmark = [pytest.mark.pypi, pytest.mark.slow]

RESOURCES_07 = [
    f"resources_servers/{c}.yaml"
    for c in (
        "aegis_v4_safety/configs/aegis_v4_model",
        "arena_judge/configs/arena_judge",
        "bird_sql/configs/bird_sql",
        "circle_count/configs/circle_count",
        "deepsearchqa/configs/deepsearchqa",
        "equivalence_llm_judge/configs/lc_judge",
        "example_multi_turn_gymnasium/configs/example_multi_turn_gymnasium",
        "false_statement_judge/configs/judge_nemotron3ultra",
        "gdp_pdf/configs/judge_model_openai",
        "grl_tetris/configs/grl_tetris",
        "iheval/configs/iheval_serve",
        "interactive_browser/configs/interactive_browser",
        "longmemeval/configs/longmemeval",
        "math_formal_lean/configs/math_formal_lean",
        "math_proof_judgement/configs/math_proof_judgement",
        "mrcr/configs/mrcr",
        "nvarc/configs/transductive",
        "physics_judge/configs/judge_openai",
        "ragtruth/configs/ragtruth_serve",
        "reasoning_gym/configs/reflection_agent",
        "rolemrc/configs/rolemrc_serve",
        "scicode/configs/scicode",
        "single_step_tool_use_with_argument_comparison/configs/single_step_tool_use_with_argument_comparison",
        "string_match/configs/string_match",
        "swe_next/configs/swe_next",
        "swe_rebench/configs/swe_rebench_opencode",
        "swemer_v1/configs/swemer_v1",
        "swerl_gen/configs/swerl_gen",
        "terminal_multi_harness/configs/terminal_multi_harness_codex",
        "toolsandbox/configs/toolsandbox",
        "vlm_eval_kit/configs/vlm_eval_kit",
        "xstest/configs/xstest",
        "example_single_tool_call/configs/example_single_tool_call",
        "example_single_tool_call/configs/example_single_tool_call_single_agent_turn",
        "finance_sec_search/configs/finance_sec_search",
    )
]
ENVIRONMENTS_07 = [
    f"environments/{n}/config.yaml"
    for n in (
        "arc_agi",
        "biomnibench_da",
        "circle_click",
        "code_gen",
        "example_single_tool_call",
        "instruction_following",
        "langgraph_parallel_thinking_math",
        "langgraph_rewoo_math",
        "nemo_user_sim",
        "opencode_reasoning_gym",
        "prime_agent_reasoning_gym",
        "wordle",
    )
]
BENCHMARKS_07 = [
    f"benchmarks/{n}/config.yaml"
    for n in (
        "aalcr",
        "aime24",
        "apex25",
        "automationbench",
        "deepsearchqa",
        "global-piqa",
        "hmmt_nov25",
        "imo_proofbench",
        "longcodebench",
        "mmlu-redux",
        "numb3rs",
        "ragtruth",
        "supergpqa",
    )
]
# the configs whose implementations are nested (``conversational_tool_use/simulation``: a tree
# ``responses_api_agents/conversational_tool_use/simulation/``), all five of the 0.7.0 wheel; the
# simulation agent's own config names a resources server only the first one defines, so both
# parsers refuse it on its own (ServerRefNotFoundError)
NESTED_07 = ["resources_servers/conversational_tool_use_simulation/configs/conversational_tool_use_simulation.yaml"] + [
    f"responses_api_agents/conversational_tool_use/{n}/configs/conversational_tool_use_{n}.yaml"
    for n in ("domain_generation", "policy_tool_generation", "scenario_generation")
]
NESTED_REFUSED_07 = [
    "responses_api_agents/conversational_tool_use/simulation/configs/conversational_tool_use_simulation.yaml"
]
CONFIGS_04 = [
    f"resources_servers/{c}.yaml"
    for c in (
        "arc_agi/configs/arc_agi",
        "aviary/configs/gsm8k_aviary",
        "bigcodebench/configs/bigcodebench",
        "calendar/configs/calendar",
        "code_gen/configs/code_gen",
        "example_multi_step/configs/example_multi_step",
        "example_single_tool_call/configs/example_single_tool_call",
        "math_with_judge/configs/math_with_judge",
        "mcqa/configs/mcqa",
        "reasoning_gym/configs/reasoning_gym",
        "workplace_assistant/configs/workplace_assistant",
        "xlam_fc/configs/xlam_fc",
        "aviary/configs/bbh_remote",
    )
] + [
    f"benchmarks/{n}/config.yaml" for n in ("aime24", "aime25", "gpqa", "ifeval", "math-500", "minif2f", "putnam_bench")
]
REFUSED = {
    "0.7.0": [
        "resources_servers/aalcr/configs/aalcr.yaml",
        "environments/abstention/config.yaml",
        "resources_servers/cvdp/configs/cvdp.yaml",
        *NESTED_REFUSED_07,
    ],
    "0.4.0": ["resources_servers/aalcr/configs/aalcr.yaml"],
}
# (config, key path) -> why the value differs; mirrored in docs/environment-packages.md
KNOWN = {
    (
        "resources_servers/finance_sec_search/configs/finance_sec_search.yaml",
        "finance_sec_search_resources_server.cache_dir",
    ): "Gym's launcher fills the top-level cache_dir with a path under its working directory; the runtime does not"
}
NULL_REFUSAL = re.compile(r"^\s*\[(GR-[A-Z-]+)\] [^:]+: ([\w.]+): is null", re.M)
VALUES = {"policy_base_url": "http://127.0.0.1:8000/v1", "policy_api_key": "parity-key", "policy_model_name": "m"}


NULL_DEFAULT = re.compile(rb"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*),\s*null\}")


def key_variables(wheel: Path) -> dict[str, str]:
    """A value for every variable behind a ``${oc.env:VAR,null}`` default in the wheel's YAML files."""
    with zipfile.ZipFile(wheel) as z:
        found = {
            m.decode() for n in z.namelist() if n.endswith((".yaml", ".yml")) for m in NULL_DEFAULT.findall(z.read(n))
        }
    return {v: f"parity-{v.lower()}" for v in sorted(found)}


@pytest.fixture(scope="module", params=["0.7.0", "0.4.0"])
def release(request: pytest.FixtureRequest) -> Iterator[tuple[str, Path, GymParser]]:
    version = request.param
    if parser_python(version) is None:
        pytest.skip(f"no Python that nemo-gym {version} runs on")
    wheel = gym_wheel_of(version)
    keys = key_variables(wheel)
    with pytest.MonkeyPatch.context() as mp:
        for var, value in keys.items():
            mp.setenv(var, value)
        with GymParser(parser_venv(version), env=dict(os.environ)) as parser:  # type: ignore[arg-type]
            yield version, wheel, parser


def instances(cfg: dict[str, Any], types: tuple[str, ...]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """``name -> (server type, implementation, block without host/port)`` by Gym's shape rule."""
    out = {}
    for name, value in cfg.items():
        if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in types:
            stype, inner = next(iter(value.items()))
            if isinstance(inner, dict) and len(inner) == 1 and isinstance(next(iter(inner.values())), dict):
                impl, block = next(iter(inner.items()))
                out[name] = (stype, impl, {k: v for k, v in block.items() if k not in ("host", "port")})
    return out


def _at(cfg: Any, path: str) -> Any:
    for part in path.split("."):
        cfg = cfg.get(part) if isinstance(cfg, dict) else None
    return cfg


def differences(gym: Any, ours: Any, path: str) -> Iterator[str]:
    if ours == "****":
        return
    if isinstance(gym, dict) and isinstance(ours, dict):
        for k in sorted(set(gym) | set(ours), key=str):
            sub = f"{path}.{k}"
            if k not in ours or k not in gym:
                yield f"{sub}: only {'Gym' if k in gym else 'gym-runtime'} has it"
            else:
                yield from differences(gym[k], ours[k], sub)
    elif isinstance(gym, list) and isinstance(ours, list) and len(gym) == len(ours):
        for i, (a, b) in enumerate(zip(gym, ours, strict=True)):
            yield from differences(a, b, f"{path}[{i}]")
    elif gym != ours:
        yield f"{path}: Gym {gym!r}, gym-runtime {ours!r}"


def ours_json(pkg: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, dict[str, Any], str]:
    monkeypatch.setenv("PARITY_POLICY_KEY", VALUES["policy_api_key"])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(
            [
                "config",
                str(pkg),
                "--json",
                "--policy-base-url",
                VALUES["policy_base_url"],
                "--policy-model-name",
                VALUES["policy_model_name"],
                "--policy-api-key-env",
                "PARITY_POLICY_KEY",
            ]
        )
    return rc, json.loads(out.getvalue()) if rc == 0 else {}, err.getvalue()


def case_list(version: str) -> list[str]:
    return RESOURCES_07 + ENVIRONMENTS_07 + BENCHMARKS_07 + NESTED_07 if version == "0.7.0" else CONFIGS_04


def test_the_lists_cover_what_parity_needs() -> None:
    assert len(RESOURCES_07 + ENVIRONMENTS_07 + BENCHMARKS_07) >= 50
    assert len(ENVIRONMENTS_07) >= 10 and len(BENCHMARKS_07) >= 10 and len(CONFIGS_04) >= 15
    assert len(NESTED_07 + NESTED_REFUSED_07) == 5  # every config of the 0.7.0 wheel naming a nested implementation


def mismatches(
    version: str, wheel: Path, parser: GymParser, config: str, root: Path, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """How ``config`` (bundled under ``root``) parses differently in gym-runtime than in Gym (module doc)."""
    types = release_for(version, "parity").server_types
    pkg = bundle_package(wheel, config, root)
    gym = parser.parse(pkg, [POLICY, config], VALUES)
    rc, ours, err = ours_json(pkg, monkeypatch)
    assert "config" in gym, f"{config}: Gym's parser refused it: {gym}"
    if rc == 1 and "[GR-CONFIG-NULL]" in err:  # refused first what Gym's server refuses at start-up
        nulls = NULL_REFUSAL.findall(err)
        assert nulls and {code for code, _ in nulls} == {"GR-CONFIG-NULL"} and err.count("] ") == len(nulls), err
        assert all(_at(gym["config"], key) is None for _, key in nulls), (config, nulls)
        return []
    assert rc == 0, f"{config}: gym-runtime refused what Gym accepts: {err}"
    g, o = instances(gym["config"], types), instances(ours["config"], types)
    diffs = (
        [f"instances only Gym has: {sorted(set(g) - set(o))}; only gym-runtime: {sorted(set(o) - set(g))}"]
        if set(g) != set(o)
        else []
    )
    for name in sorted(set(g) & set(o)):
        if g[name][:2] != o[name][:2]:
            diffs.append(f"{name}: {g[name][:2]} vs {o[name][:2]}")
        diffs += [d for d in differences(g[name][2], o[name][2], name) if (config, d.split(":")[0]) not in KNOWN]
    runs = {s["name"]: s for s in ours["servers"]}
    diffs += [
        f"{name}: in the config but not a server instance gym-runtime runs"
        for name in o
        if o[name][0] in SERVER_TYPES_RUN and name not in runs
    ]
    diffs += [
        f"{name}: gym-runtime runs implementation {runs[name]['implementation']!r}, Gym's config names {o[name][1]!r}"
        for name in o
        if name in runs and runs[name]["implementation"] != o[name][1]
    ]
    return diffs


def test_server_blocks_match_gyms_parser(release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    version, wheel, parser = release
    found = {
        config: diffs
        for n, config in enumerate(case_list(version))
        if (diffs := mismatches(version, wheel, parser, config, tmp_path / str(n), monkeypatch))
    }
    assert not found, json.dumps(found, indent=1)


def test_nested_implementations_match_gyms_parser(release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 0.7.0 wheel's five configs of nested implementations (``conversational_tool_use/simulation``)
    parse as Gym parses them: four to the same server blocks, each nested implementation a server
    gym-runtime runs from its own nested tree; the fifth refused by both, for the same reason."""
    version, wheel, parser = release
    if version != "0.7.0":
        pytest.skip("nested implementations arrived with NeMo Gym 0.7.0")
    found = {
        config: diffs
        for n, config in enumerate(NESTED_07)
        if (diffs := mismatches(version, wheel, parser, config, tmp_path / str(n), monkeypatch))
    }
    assert not found, json.dumps(found, indent=1)
    _, ours, _ = ours_json(tmp_path / "0", monkeypatch)
    agent = next(s for s in ours["servers"] if s["name"] == "conversational_tool_use_agent")
    assert agent["implementation"] == "conversational_tool_use/simulation" and agent["origin"] == "package"
    assert agent["server_dir"].endswith("/responses_api_agents/conversational_tool_use/simulation")
    pkg = bundle_package(wheel, NESTED_REFUSED_07[0], tmp_path / "refused")
    gym = parser.parse(pkg, [POLICY, NESTED_REFUSED_07[0]], VALUES)
    rc, _, err = ours_json(pkg, monkeypatch)
    assert gym.get("error") == "ServerRefNotFoundError" and rc == 1
    assert "error[GR-CONFIG-REF]: ServerRefNotFoundError" in err and "conversational_tool_use/simulation" in err


def test_configs_gym_refuses_are_refused(release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    version, wheel, parser = release
    for n, config in enumerate(REFUSED[version]):
        pkg = bundle_package(wheel, config, tmp_path / str(n))
        assert "error" in parser.parse(pkg, [POLICY, config], VALUES), config
        rc, _, err = ours_json(pkg, monkeypatch)
        assert rc == 1 and "error[GR-CONFIG" in err, f"{config}: {err}"
