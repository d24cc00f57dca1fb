"""Fixtures for venv-builder tests: runtime settings on a loopback index, and packages made
from the failure cases in ``tests/cases/data`` (their manifests are sketches: see the cases README)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gym_runtime.config import MergedConfig, build_config
from gym_runtime.package import check_package
from gym_runtime.settings import RuntimeSettings, load_settings
from tests.helpers.cases import case_package
from tests.helpers.index import write_simple_index

TINY_PINS = {"nemo-gym": "0.4.0", "ray[default]": "2.60.0", "openai": "2.7.2"}


@pytest.fixture(scope="session")
def uv_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uv cache for the session's venv tests (kept apart from the user's cache)."""
    return tmp_path_factory.mktemp("uv-cache")


@pytest.fixture
def empty_index(tmp_path: Path) -> str:
    """A ``file://`` simple index with nothing in it."""
    (tmp_path / "empty-files").mkdir()
    return write_simple_index(tmp_path / "empty-files", tmp_path / "empty-index")


@pytest.fixture
def make_settings(tmp_path: Path, uv_cache: Path, empty_index: str) -> Callable[..., RuntimeSettings]:
    """``make_settings(index_url=None, pin_mode="auto", pins=None, env=None)`` -> settings whose
    stage 1 resolves against ``index_url`` (default: an empty ``file://`` index), never PyPI; the
    pins (default :data:`TINY_PINS`) count as set by the operator, so every venv gets them as given."""

    def make(
        index_url: str | None = None,
        pin_mode: str = "auto",
        pins: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        home: Path | None = None,
    ) -> RuntimeSettings:
        base = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
        base.update(
            {
                "GYM_RUNTIME_HOME": str(home or tmp_path / "home"),
                "GYM_RUNTIME_UV_CACHE_DIR": str(uv_cache),
                "UV_INDEX_URL": index_url or empty_index,
                "GYM_RUNTIME_PIN_MODE": pin_mode,
            }
        )
        base.update(env or {})
        s = load_settings(base)
        chosen = dict(pins if pins is not None else TINY_PINS)
        return s.with_overrides(pins=chosen, pin_origins={k: f"set by the test ({k})" for k in chosen})

    return make


def _patch_domains(path: Path) -> None:
    data = yaml.safe_load(path.read_text()) or {}
    for value in data.values():
        for impl in (value or {}).get("resources_servers", {}).values() if isinstance(value, dict) else []:
            impl.setdefault("domain", "other")
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _finish(root: Path, wheels: list[Path] | None, requirements: dict[str, str] | None) -> Path:
    if wheels is not None:
        shutil.rmtree(root / "wheels", ignore_errors=True)
        (root / "wheels").mkdir()
        for w in wheels:
            shutil.copy(w, root / "wheels" / w.name)
    for rel, text in (requirements or {}).items():
        (root / rel).mkdir(parents=True, exist_ok=True)
        (root / rel / "requirements.txt").write_text(text)
    for req in [*root.glob("*/*/requirements.txt"), *root.glob("*/*/pyproject.toml")]:
        if not (req.parent / "app.py").exists():
            (req.parent / "app.py").write_text("# test fixture\n")
    for rel in yaml.safe_load((root / "nemo-environment.yaml").read_text())["config_paths"]:
        _patch_domains(root / rel)
    return root


def case_pkg(
    case: str,
    dest: Path,
    *,
    fmt: str | None = None,
    wheels: list[Path] | None = None,
    requirements: dict[str, str] | None = None,
) -> Path:
    """The package of ``tests/cases/data/<case>`` (tests.helpers.cases), with ``wheels/`` replaced by
    ``wheels`` (tiny wheels the test built from the case listing, with their Requires-Dist) and
    requirements.txt files overridden by ``requirements`` (``{"resources_servers/x": text}``);
    resources servers without a ``domain`` get ``other``."""
    return _finish(case_package(case, dest, fmt=fmt).root, wheels, requirements)


def synthetic_pkg(
    dest: Path,
    servers: dict[str, tuple[str, str]],
    *,
    wheels: list[Path] | None = None,
    impl: dict[str, str] | None = None,
) -> Path:
    """A package with ``servers``: ``{instance: (server_type, requirements text)}``; each instance
    gets its own server dir (or ``impl[instance]``'s). wheels-v1 when ``wheels`` is given."""
    dest.mkdir(parents=True, exist_ok=True)
    impl = impl or {}
    fmt = "wheels-v1" if wheels is not None else "native-v1"
    config: dict[str, Any] = {}
    for name, (stype, text) in servers.items():
        d = dest / stype / impl.get(name, name)
        d.mkdir(parents=True, exist_ok=True)
        (d / "requirements.txt").write_text(text)
        (d / "app.py").write_text("# test fixture\n")
        config.update(server_config(name, stype, impl.get(name, name)))
    first = next(iter(servers))
    rel = "configs/env.yaml" if fmt == "wheels-v1" else f"{servers[first][0]}/{impl.get(first, first)}/configs/env.yaml"
    (dest / rel).parent.mkdir(parents=True, exist_ok=True)
    (dest / rel).write_text(yaml.safe_dump(config, sort_keys=False))
    manifest = {"format": fmt, "config_paths": [rel], "metadata": {"name": "test-env"}}
    (dest / "nemo-environment.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return _finish(dest, wheels, None)


def merged_config(root: Path, overrides: list[str] | None = None, version: str = TINY_PINS["nemo-gym"]) -> MergedConfig:
    """Load a package (tolerating package violations such as an sdist in wheels/) and merge its config
    under Gym release ``version`` (default: :data:`TINY_PINS`'s, the 0.4 line: no relay is generated
    in front of an agent, so the plans hold the package's own servers only)."""
    from gym_runtime.gym_release import release_for

    pkg, _violations = check_package(root)
    assert pkg is not None, _violations
    return build_config(
        pkg, overrides or [], builtin_root=root / "_no_builtins", release=release_for(version, "the test's pins")
    )


def server_config(
    name: str, server_type: str = "resources_servers", impl: str | None = None, **extra: Any
) -> dict[str, Any]:
    """One server instance block in Gym's shape."""
    inner = {"entrypoint": "app.py", **extra}
    if server_type == "resources_servers":
        inner.setdefault("domain", "other")
    return {name: {server_type: {impl or name: inner}}}
