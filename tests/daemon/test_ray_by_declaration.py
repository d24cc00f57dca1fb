"""Ray only where a server uses it (docs/runtime.md, "Ray"): a Gym SDK server of the 0.7 line whose
class declares ``ray_enabled = False`` gets no Ray head and the host's best isolation; one that
declares nothing uses Ray, as NeMo Gym 0.7.0 does (``nemo_gym/server_utils.py``
``_server_uses_ray``), when its tree imports Ray, and runs without it otherwise; a ``ray_enabled``
key in the server's config is no longer read, with a warning saying what to do instead.

The server's venv holds a stand-in ``nemo_gym`` 0.7.0 (a tiny wheel offered through uv's own
``UV_FIND_LINKS``, no index), so the daemon sees a Gym SDK venv without PyPI; the server is the
stdlib fixture behind a class declaration. Its Python must meet 0.7.0's ``Requires-Python``
(``tests/helpers/gym_python.py``: the host's, or the one ``.ci/provision-python`` built).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import probe_isolation
from tests.helpers.daemon import FIXTURE_APP, ready_then_stop, up_process, write_fixture_package
from tests.helpers.gym_python import gym_python
from tests.helpers.wheels import build_wheel

pytestmark = pytest.mark.slow

DECLARED = {"false": "    ray_enabled = False\n", "undeclared": "", "undeclared-imports-ray": ""}
# read, never run: the fixture's venv has no Ray
IMPORTS_RAY = "\n\ndef _scale_out():\n    import ray\n\n    return ray\n"


def sdk_server_package(root: Path, declaration: str) -> Path:
    app = (
        "class AcmeServer:\n" + DECLARED[declaration] + "    @classmethod\n    def run_webserver(cls):\n"
        "        pass\n\n\nif __name__ == '__main__':\n    AcmeServer.run_webserver()\n"
        + FIXTURE_APP
        + (IMPORTS_RAY if declaration == "undeclared-imports-ray" else "")
    )
    pkg = write_fixture_package(
        root,
        {
            "acme_math": {
                "resources_servers": {
                    "acme_math": {"domain": "math", **({"ray_enabled": True} if declaration == "false" else {})}
                }
            }
        },
        apps={"acme_math": app},
    )
    (pkg / "resources_servers" / "acme_math" / "requirements.txt").write_text("nemo-gym==0.7.0\n")
    return pkg


@pytest.mark.parametrize("declaration", sorted(DECLARED))
def test_ray_head_only_for_servers_that_use_ray(tmp_path: Path, declaration: str) -> None:
    python = gym_python()
    links = tmp_path / "links"
    build_wheel(links, "nemo-gym", "0.7.0", files={"nemo_gym/__init__.py": "__version__ = '0.7.0'\n"})
    env = {
        "GYM_RUNTIME_HOME": str(tmp_path / "home"),
        "GYM_RUNTIME_PYTHON": str(python),
        "GYM_RUNTIME_PIN_MODE": "none",
        "UV_FIND_LINKS": str(links),
        "UV_OFFLINE": "1",
    }
    info, err = ready_then_stop(up_process(sdk_server_package(tmp_path / "pkg", declaration), tmp_path, env=env))
    assert info["gym_release"]["version"] == "0.7.0"
    best = probe_isolation().level.value
    if declaration == "false":
        assert info["ray"]["mode"] == "none" and info["isolation"] == best, err
        assert "warning[GR-CONFIG-RAY-ENABLED]" in err and "ray: acme_math uses Ray" not in err
    elif declaration == "undeclared":
        assert info["ray"]["mode"] == "none" and info["ray"]["without"] == ["acme_math"]
        assert info["isolation"] == best, err
        assert "ray: acme_math runs without Ray: its class does not declare ray_enabled" in err
    else:
        assert info["ray"]["mode"] == "local" and info["ray"]["needed_by"] == ["acme_math"]
        assert info["isolation"] == ("partial" if best == "full" else best)
        assert "ray: acme_math uses Ray: a Gym SDK server whose class does not declare ray_enabled" in err
        assert "Ray, as NeMo Gym does, since app.py:" in err and " imports ray" in err
