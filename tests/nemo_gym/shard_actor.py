"""A Ray actor holding one ``RunHelper``, as NeMo RL's ``NemoGym`` actor does for one shard of a
``NemoGymShardSet``: ``spinup`` calls ``RunHelper.start`` with the shard's global config,
``health_check`` calls ``poll``, ``shutdown`` calls ``shutdown``. Two calls run at once
(``max_concurrency=2``), so the set's cleanup can reach a shard that is still in ``spinup``.
Imported by the cluster's workers from this checkout (the test cluster puts it on ``PYTHONPATH``).
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import ray
from omegaconf import DictConfig


@ray.remote(num_cpus=0, max_concurrency=2)
class Shard:
    def __init__(self, root: str, environ: dict[str, str]) -> None:
        from gym_runtime.nemo_gym import RunHelper

        os.environ.update(environ)
        os.chdir(root)  # config_paths are relative to the Gym checkout, as in NeMo RL's actor
        self.rh = RunHelper()

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def spinup(self, initial: dict) -> str:
        """``RunHelper.start``; the head server's URL."""
        from gym_runtime.nemo_gym import GlobalConfigDictParserConfig

        self.rh.start(
            GlobalConfigDictParserConfig(
                dotenv_path=Path(os.getcwd()) / "nemo_gym_env.yaml",
                initial_global_config_dict=DictConfig(initial),
                skip_load_from_cli=True,
            )
        )
        return self.rh.head_url

    def starting_servers(self) -> bool:
        """True once the start has spawned server processes (and is not done)."""
        rt = self.rh._runtime
        return bool(rt and rt.env and rt.env.supervisor.members) and self.rh.ready_info is None

    def health_check(self) -> bool:
        self.rh.poll()
        return True

    def shutdown(self) -> list[int]:
        """``RunHelper.shutdown``; the pids of this actor's descendants left after it."""
        self.rh.shutdown()
        return [p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
