"""A drop-in for NeMo Gym 0.7.0's in-process launcher, as NeMo RL calls it: the whole swap is ::

    from gym_runtime.nemo_gym import GlobalConfigDictParserConfig, RunHelper

in place of ``from nemo_gym.cli import GlobalConfigDictParserConfig, RunHelper`` (docs/trainers.md).
"""

from gym_runtime.nemo_gym.job import GlobalConfigDictParserConfig
from gym_runtime.nemo_gym.run_helper import RunHelper

__all__ = ["GlobalConfigDictParserConfig", "RunHelper"]
