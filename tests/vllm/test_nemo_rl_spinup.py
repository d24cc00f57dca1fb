"""NeMo RL's ``_spinup`` through the ``RunHelper`` drop-in against a real vLLM engine on the tiny
model (docs/rollouts.md, "A real vLLM engine"): NeMo Gym 0.7.0's own trees, a Ray cluster the test
started, Gym 0.7.0's own ``RolloutCollectionHelper.run_examples`` (tests/nemo_gym/spinup.py, as in
tests/nemo_gym/test_nemo_rl_spinup.py with the stub model). Each result's first trained item holds
vLLM's own ``/tokenize`` of the row's chat as ``prompt_token_ids``, and the token ids and logprobs of
vLLM's own greedy completion of it as ``generation_token_ids`` / ``generation_log_probs``; then
``poll()`` raises once a server was killed for good and ``shutdown()`` leaves no process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.nemo_gym.spinup import collect, kill_for_good, ours, rows_of, spinup, token_items
from tests.nemo_gym.test_nemo_rl_spinup import cluster, on_the_node, python  # noqa: F401 - fixtures
from tests.vllm.helpers import logprob_ids, vllm_chat, vllm_tokenize

pytestmark = [pytest.mark.vllm, pytest.mark.pypi, pytest.mark.slow, pytest.mark.timeout(2400)]
MAX_TOKENS = 60
LOGPROB_TOLERANCE = 0.05  # the same engine, another batch: CPU kernels are not bit-exact across batches


def chat_body(create: dict) -> dict:
    """The chat request Gym's ``vllm_model`` makes of a row's first turn (roles kept, tools in chat form)."""
    tools = [
        {"type": "function", "function": {k: v for k, v in t.items() if k not in ("type", "strict")}}
        for t in create.get("tools") or []
    ]
    return {
        "messages": create["input"],
        "temperature": 0,
        "max_tokens": MAX_TOKENS,
        **({"tools": tools} if tools else {}),
    }


def test_nemo_rls_spinup_gets_vllms_own_token_ids_and_logprobs(
    engine,
    on_the_node: Path,
    cluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    from tests.helpers.gym_package import gym_venv

    served = engine("tools")
    venv = gym_venv("0.7.0")
    assert venv is not None
    rows = rows_of(on_the_node / "resources_servers/example_single_tool_call/data/example.jsonl", 3)
    for r in rows:  # greedy, so vLLM's own completion of the same chat is the same tokens
        r["responses_create_params"].update(temperature=0, max_output_tokens=MAX_TOKENS)
    before = ours(cluster.proc.pid)
    rh, head_port = spinup([served.base_url], served.model, cluster.address, tmp_path)
    try:
        results = collect(venv / "bin" / "python", head_port, rows)
        assert sorted(row["_rowidx"] for row, _ in results) == [0, 1, 2]
        for row, result in results:
            assert isinstance(result["reward"], float), result
            first = token_items(result)[0]
            body = chat_body(row["responses_create_params"])
            assert first["prompt_token_ids"] == vllm_tokenize(served, body)
            own = vllm_chat(served, body)
            assert first["generation_token_ids"] == logprob_ids(own)
            theirs = [e["logprob"] for e in own["choices"][0]["logprobs"]["content"]]
            assert len(first["generation_log_probs"]) == len(theirs)
            assert all(
                abs(a - b) <= LOGPROB_TOLERANCE for a, b in zip(first["generation_log_probs"], theirs, strict=True)
            )
        rh.poll()
        failure = kill_for_good(rh, "example_single_tool_call")
        assert failure.code.startswith("GR-START")
    finally:
        rh.shutdown()
    assert ours(cluster.proc.pid) - before == set()
