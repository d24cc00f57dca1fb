"""The environment package of a Gym release's own closure, for ``gym-runtime prefetch --gym-release``.

A Gym tree whose install file holds only Gym's editable checkout line (``-e nemo-gym[dev] @
../../``, what every example tree of the ``nemo-gym`` 0.7.0 wheel has, as do its
``simple_agent`` and ``legacy_agent``) gets the venv plan of the pinned SDK alone: its digest
covers the rendered requirement lines, the pins, the Python, uv and the index settings, never the
package's path or name (gym_runtime/venvs/plan.py). Building the one server of this package
therefore fills the uv cache and records the resolution every such tree's venv replays, and the
venv it leaves is the one they reuse.
"""

from __future__ import annotations

from pathlib import Path

import yaml

SERVER = "gym_sdk"
GYM_CHECKOUT_LINE = "-e nemo-gym[dev] @ ../../"  # Gym's own requirements.txt line in its trees


def write_sdk_package(root: Path) -> Path:
    """Write a native-v1 package of one resources server ``gym_sdk`` whose ``requirements.txt`` is
    :data:`GYM_CHECKOUT_LINE` into ``root`` (replacing what an earlier call wrote); returns ``root``.
    The server is built, never started. Raises OSError when ``root`` cannot be written."""
    tree = root / "resources_servers" / SERVER
    (tree / "configs").mkdir(parents=True, exist_ok=True)
    (tree / "requirements.txt").write_text(GYM_CHECKOUT_LINE + "\n")
    (tree / "app.py").write_text('"""Built by `gym-runtime prefetch --gym-release`, never started."""\n')
    config = {SERVER: {"resources_servers": {SERVER: {"entrypoint": "app.py", "domain": "other"}}}}
    (tree / "configs" / f"{SERVER}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    manifest = {
        "format": "native-v1",
        "config_paths": [f"resources_servers/{SERVER}/configs/{SERVER}.yaml"],
        "metadata": {"name": "gym-sdk-closure"},
    }
    (root / "nemo-environment.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return root
