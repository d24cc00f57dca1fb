"""Build small, valid environment packages (docs/architecture.md §3) and tiny wheels for tests.

``make_package(root, fmt)`` writes a package of format ``native-v1``, ``wheels-v1`` or
``adapter-wheels-v1`` that passes ``gym-runtime validate`` with every implementation inside the
package (so no built-in ``servers/`` is needed), shaped for NeMo Gym 0.7 (the default release):
its agent is fronted by an environment server of its own, so no built-in relay is generated. ``write_wheel`` writes a real, minimal wheel
(a zip with ``<pkg>/__init__.py``, ``METADATA``, ``WHEEL`` and ``RECORD``).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import yaml
from packaging.utils import parse_wheel_filename

APP = "# test fixture server\nprint('ok')\n"

POLICY = {
    "policy_model": {
        "responses_api_models": {
            "policy_stub": {
                "entrypoint": "app.py",
                "base_url": "${policy_base_url}",
                "api_key": "${policy_api_key}",
                "model": "${policy_model_name}",
                "return_token_id_information": True,
            }
        }
    }
}
ENV = {
    "acme_math": {"resources_servers": {"acme_math": {"entrypoint": "app.py", "domain": "math"}}},
    "acme_math_agent": {
        "responses_api_agents": {
            "acme_agent": {
                "entrypoint": "app.py",
                "resources_server": {"type": "resources_servers", "name": "acme_math"},
                "model_server": {"type": "responses_api_models", "name": "policy_model"},
            }
        }
    },
    "acme_math_environment_server": {
        "environment_servers": {
            "acme_relay": {
                "entrypoint": "app.py",
                "agent_server": {"type": "responses_api_agents", "name": "acme_math_agent"},
            }
        }
    },
}
ADAPTER_ENV = {
    "acme_vf": {
        "responses_api_agents": {
            "verifiers_agent": {
                "entrypoint": "app.py",
                "vf_env_id": "acme-vf",
                "model_server": {"type": "responses_api_models", "name": "policy_model"},
            }
        }
    },
    "acme_vf_environment_server": {
        "environment_servers": {
            "acme_relay": {"entrypoint": "app.py", "agent_server": {"type": "responses_api_agents", "name": "acme_vf"}}
        }
    },
}

SERVERS = {
    "native-v1": [
        ("responses_api_models", "policy_stub"),
        ("resources_servers", "acme_math"),
        ("responses_api_agents", "acme_agent"),
        ("environment_servers", "acme_relay"),
    ],
    "wheels-v1": [
        ("responses_api_models", "policy_stub"),
        ("resources_servers", "acme_math"),
        ("responses_api_agents", "acme_agent"),
        ("environment_servers", "acme_relay"),
    ],
    "adapter-wheels-v1": [
        ("responses_api_models", "policy_stub"),
        ("responses_api_agents", "verifiers_agent"),
        ("environment_servers", "acme_relay"),
    ],
}
CONFIGS = {
    "native-v1": [
        "responses_api_models/policy_stub/configs/policy_model.yaml",
        "resources_servers/acme_math/configs/acme_math.yaml",
    ],
    "wheels-v1": ["configs/policy_model.yaml", "configs/acme_math.yaml"],
    "adapter-wheels-v1": ["configs/policy_model.yaml", "configs/verifiers_agent.yaml"],
}


def write_wheel(directory: Path, filename: str, requires: list[str] | None = None) -> Path:
    """Write a minimal installable wheel named ``filename`` into ``directory``; returns its path."""
    name, version, _, _ = parse_wheel_filename(filename)
    mod = name.replace("-", "_")
    dist_info = f"{filename.split('-')[0]}-{filename.split('-')[1]}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires or [])
    files = {
        f"{mod}/__init__.py": f"__version__ = '{version}'\n",
        f"{dist_info}/METADATA": meta,
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{p},,\n" for p in files) + f"{dist_info}/RECORD,,\n"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    with zipfile.ZipFile(path, "w") as z:
        for p, text in files.items():
            z.writestr(p, text)
        z.writestr(f"{dist_info}/RECORD", record)
    return path


def write_server(root: Path, server_type: str, implementation: str, install: str = "requirements.txt") -> Path:
    """A server tree ``{server_type}/{implementation}/`` with ``app.py`` and one install file."""
    d = root / server_type / implementation
    d.mkdir(parents=True, exist_ok=True)
    (d / "app.py").write_text(APP)
    (d / install).write_text(
        "# no extra dependencies\n"
        if install == "requirements.txt"
        else f"[project]\nname = '{implementation}'\nversion = '0.1.0'\n"
    )
    return d


def manifest(fmt: str, name: str = "acme-math-env") -> dict:
    """The manifest dict of the valid package of format ``fmt``."""
    m: dict = {"format": fmt, "config_paths": list(CONFIGS[fmt]), "metadata": {"name": name}}
    if fmt == "adapter-wheels-v1":
        m["adapter"] = {"agent": "verifiers_agent", "agent_type": "responses_api_agents"}
    return m


def write_manifest(root: Path, data: object) -> None:
    (root / "nemo-environment.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def make_package(root: Path, fmt: str = "native-v1", name: str = "acme-math-env") -> Path:
    """Write a valid package of format ``fmt`` at ``root`` (created); returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    write_manifest(root, manifest(fmt, name))
    for st, impl in SERVERS[fmt]:
        write_server(root, st, impl)
    env = ADAPTER_ENV if fmt == "adapter-wheels-v1" else ENV
    for rel, data in zip(CONFIGS[fmt], (POLICY, env), strict=True):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(yaml.safe_dump(data, sort_keys=False))
    if fmt != "native-v1":
        write_wheel(root / "wheels", "acme_math_lib-0.1.0-py3-none-any.whl")
        write_wheel(root / "wheels", "pip-24.0-py3-none-any.whl")
    return root
