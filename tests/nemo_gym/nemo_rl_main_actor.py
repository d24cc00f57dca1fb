"""NeMo RL main's ``NemoGym`` actor for one shard, replayed in a process of its own: run as a script
in the Gym checkout (the working directory) with the project and ``nemo-gym==0.7.0`` in its venv
(tests/helpers/actor_venv.py). It reads JSON lines on stdin and answers JSON lines on stdout:

1. ``{"argv", "initial", "token"}``: it makes ``sys.argv`` the Ray worker's command line, puts the
   ledger's control token in its own environment (``NEMO_GYM_TOKEN_CAPTURE_CONTROL_TOKEN``, as
   ``_spinup`` does), calls the drop-in's ``RunHelper().start(...)`` with ``initial`` as the
   ``initial_global_config_dict``, and answers ``{"entries"}``: ``list_entries()`` over Gym's
   in-process config (NeMo RL main's computation).
2. ``{"rows", "head": [host, port]}``: ``run_rollouts`` as the actor runs them: Gym's own
   ``RolloutCollectionHelper.run_examples`` against its head server while ``health_check`` runs
   ``poll`` in a worker thread (``asyncio.to_thread``) every 0.2 s; then each row's manifest read as
   the ledger mode reads it (Gym's ``ServerClient.load_from_global_config(head_server_config)``,
   ``request(server_name="policy_model", ...)``) with the token and without it; then ``shutdown()``.
   It answers ``{"results", "polls", "poll_errors", "manifests", "refused", "shutdown_s", "left"}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from actor_process import left, started_entries  # this script's own folder (tests/nemo_gym/)

CONTROL = "NEMO_GYM_TOKEN_CAPTURE_CONTROL_TOKEN"
MANIFEST = "/training-token-capture/control/rollouts/{}/manifest"


async def rollouts(rh, rows: list[dict], host: str, port: int, token: str) -> dict:
    from nemo_gym.rollout_collection import RolloutCollectionHelper
    from nemo_gym.server_utils import BaseServerConfig, ServerClient

    head = BaseServerConfig(host=host, port=port)
    polls, errors, done = [0], [], asyncio.Event()

    async def health_check() -> None:  # NeMo RL: `await asyncio.to_thread(self.rh.poll)`
        while not done.is_set():
            try:
                await asyncio.to_thread(rh.poll)
                polls[0] += 1
            except Exception as e:  # noqa: BLE001 - reported
                errors.append(f"{type(e).__name__}: {e}")
            await asyncio.sleep(0.2)

    async def collect() -> list:
        out = []
        try:
            for task in RolloutCollectionHelper().run_examples(examples=rows, head_server_config=head):
                row, result = await task
                out.append([row, result])
        finally:
            done.set()
        return out

    checks = asyncio.create_task(health_check())
    results = await collect()
    await checks
    client = ServerClient.load_from_global_config(head)
    manifests, refused = {}, {}
    for row, _ in results:
        rollout_id = row["_ng_rollout_id"]
        for headers, into in (({"Authorization": f"Bearer {token}"}, manifests), ({}, refused)):
            response = await client.request(
                server_name="policy_model", url_path=MANIFEST.format(rollout_id), method="GET", headers=headers
            )
            into[rollout_id] = {"status": response.status, "body": await response.text()}
    return {"results": results, "polls": polls[0], "poll_errors": errors, "manifests": manifests, "refused": refused}


def main() -> None:
    spin = json.loads(sys.stdin.readline())
    sys.argv = list(spin["argv"])  # the Ray worker's own command line, as inside the actor
    os.environ[CONTROL] = spin["token"]

    from nemo_gym.global_config import get_global_config_dict
    from omegaconf import DictConfig

    from gym_runtime.nemo_gym import GlobalConfigDictParserConfig, RunHelper

    rh = RunHelper()
    rh.start(
        GlobalConfigDictParserConfig(
            dotenv_path=os.path.join(os.getcwd(), "nemo_gym_env.yaml"),
            initial_global_config_dict=DictConfig(spin["initial"]),
            skip_load_from_cli=True,
        )
    )
    print(json.dumps({"entries": started_entries(get_global_config_dict())}), flush=True)
    run = json.loads(sys.stdin.readline())
    try:
        out = asyncio.run(rollouts(rh, run["rows"], *run["head"], spin["token"]))
    finally:
        t0 = time.monotonic()
        rh.shutdown()
        took = time.monotonic() - t0
    print(json.dumps({**out, "shutdown_s": took, "left": left()}), flush=True)


if __name__ == "__main__":
    main()
