"""NeMo RL main's ledger token capture through the ``RunHelper`` drop-in, against a real vLLM engine
on the tiny model (docs/trainers.md, "Ledger token capture"): NeMo Gym 0.7.0's own trees and
``token_id_capture`` package, the keys NeMo RL main's ``_spinup`` sets when ``token_capture.enabled``
(``return_token_id_information: false`` on ``policy_model``, the ``token_id_capture`` block with a
``FileLineageStore`` ledger under the trainer's capture directory, ``external_staging``, the control
token in the actor's own environment), rows stamped with ``_ng_rollout_id`` collected by Gym's own
``RolloutCollectionHelper``, then each rollout's manifest read as NeMo RL reads it: Gym's
``ServerClient.load_from_global_config(head_server_config).request(server_name="policy_model", ...)``
with ``Authorization: Bearer <token>``.

Stock vLLM has no NeMo RL worker extension, so it stages no token deltas and returns no commit
coordinates: each model call is in the manifest as a failure (``failures``, naming the call), which
is what Gym's ledger records for a worker answer without coordinates. What this proves: the keys
pass through, the directories are written where the trainer named them, the control routes are
served behind the token and the manifest names every model call of its rollout.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.nemo_gym.spinup import collect, ours, rows_of, spinup
from tests.nemo_gym.test_nemo_rl_spinup import cluster, on_the_node, python  # noqa: F401 - fixtures

pytestmark = [pytest.mark.vllm, pytest.mark.pypi, pytest.mark.slow, pytest.mark.timeout(2400)]
CONTROL = "NEMO_GYM_TOKEN_CAPTURE_CONTROL_TOKEN"
TOKEN = "ledger-control-secret"

MANIFEST = r"""
import asyncio, json, sys
from nemo_gym.server_utils import BaseServerConfig, ServerClient
args = json.loads(sys.stdin.read())  # not argv: Gym parses the command line as Hydra overrides

async def main():
    client = ServerClient.load_from_global_config(BaseServerConfig(host="127.0.0.1", port=args["port"]))
    out = {}
    for rollout_id in args["ids"]:
        headers = {"Authorization": f"Bearer {args['token']}"} if args["token"] else {}
        response = await client.request(
            server_name="policy_model",
            url_path=f"/training-token-capture/control/rollouts/{rollout_id}/manifest",
            method="GET",
            headers=headers,
        )
        out[rollout_id] = {"status": response.status, "body": await response.text()}
    print(json.dumps(out))

asyncio.run(main())
"""


def ledger_keys(capture: Path) -> dict:
    """The keys NeMo RL main's ``_spinup`` adds in ledger mode (its ``token_capture`` block enabled)."""
    return {
        "policy_model": {"responses_api_models": {"vllm_model": {"return_token_id_information": False}}},
        "token_id_capture": {
            "enabled": True,
            "all_agents": True,
            "rebuild_response": False,
            "dir": str(capture),
            "lineage_store": "nemo_gym.token_id_capture.lineage:FileLineageStore",
            "lineage_store_kwargs": {"root": str(capture / "lineage")},
            "external_staging": True,
            "external_staging_backend": "vllm_worker",
            "control_auth_token_env": CONTROL,
        },
    }


def manifests(gym_python: Path, head_port: int, ids: list[str], token: str | None) -> dict:
    done = subprocess.run(
        [str(gym_python), "-c", MANIFEST],
        input=json.dumps({"port": head_port, "ids": ids, "token": token}),
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": f"{gym_python.parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "NO_PROXY": "*"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return json.loads(done.stdout.splitlines()[-1])


def server_environs(pid: int) -> dict[str, dict[str, str]]:
    """Each server process's environment (``NEMO_GYM_CONFIG_PATH`` names its instance)."""
    out = {}
    for p in psutil.Process(pid).children(recursive=True):
        try:
            env = p.environ()
        except psutil.Error:
            continue
        if "NEMO_GYM_CONFIG_PATH" in env:
            out[env["NEMO_GYM_CONFIG_PATH"]] = env
    return out


def test_nemo_rl_mains_ledger_mode_serves_each_rollouts_manifest_behind_the_control_token(
    engine,
    on_the_node: Path,  # noqa: F811 - the fixture imported above
    cluster,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.helpers.gym_package import gym_venv

    served = engine("tools")
    venv = gym_venv("0.7.0")
    assert venv is not None
    capture = tmp_path / "trainer" / "token-capture"
    monkeypatch.setenv(CONTROL, TOKEN)  # NeMo RL puts it in the actor's own environment
    monkeypatch.setenv("GYM_RUNTIME_PRELOAD", "off")  # each server's environment is its /proc environ
    rows = rows_of(on_the_node / "resources_servers/example_single_tool_call/data/example.jsonl", 2)
    ids = [f"rollout-{i}" for i in range(len(rows))]
    for row, rollout_id in zip(rows, ids, strict=True):
        row["_ng_rollout_id"] = rollout_id
        row["responses_create_params"].update(temperature=0, max_output_tokens=40)
    before = ours(cluster.proc.pid)
    rh, head_port = spinup([served.base_url], served.model, cluster.address, tmp_path, ledger_keys(capture))
    try:
        environs = server_environs(os.getpid())
        results = collect(venv / "bin" / "python", head_port, rows)
        assert sorted(row["_rowidx"] for row, _ in results) == [0, 1]
        assert all(isinstance(result["reward"], float) for _, result in results), results
        with_token = manifests(venv / "bin" / "python", head_port, ids, TOKEN)
        without = manifests(venv / "bin" / "python", head_port, ids, None)
        wrong = manifests(venv / "bin" / "python", head_port, ids[:1], "not-the-token")
    finally:
        rh.shutdown()
    assert ours(cluster.proc.pid) - before == set()
    # the control token reached the model server, which serves the control routes, and no other server
    holders = {name for name, env in environs.items() if env.get(CONTROL)}
    assert holders == {"policy_model"}, sorted(environs)
    assert environs["policy_model"][CONTROL] == TOKEN
    for rollout_id in ids:
        answer = with_token[rollout_id]
        assert answer["status"] == 200, answer
        manifest = json.loads(answer["body"])
        assert manifest["rollout_id"] == rollout_id
        calls = {r["model_call_id"] for r in manifest["records"]} | {f["model_call_id"] for f in manifest["failures"]}
        assert calls, manifest  # every model call of the rollout is named
        assert without[rollout_id]["status"] == 401, without[rollout_id]
    assert wrong[ids[0]]["status"] == 401
    # written where the trainer named them
    assert (capture / "lineage").is_dir() and any((capture / "lineage").iterdir())
