"""The job's policy values at ``up``: which endpoint ``policy_model`` uses, with what key and name.

* No ``--policy-base-url`` (nor a ``policy_base_url=URL`` override, which counts the same): the built-in stub model (serving the model name given, else
  ``stub-model``) stands in, but only when the package has something that uses it: an instance
  named ``policy_model``, a server reference to ``responses_api_models/policy_model``, or a
  config value holding the policy URL. Otherwise no stub is started.
* A base URL with no API key (flag, ``policy_api_key=`` override or ``GYM_RUNTIME_POLICY_API_KEY``): the key ``EMPTY``, the
  OpenAI-client convention for a keyless vLLM endpoint, merged beneath every config file and
  override (a key set there still wins) and said on stderr (the key itself never is).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from gym_runtime.config import MergedConfig, PolicyValues
from gym_runtime.config import build_config as _build_config
from gym_runtime.config.redact import KEYLESS_API_KEY
from gym_runtime.errors import ConfigError
from gym_runtime.gym_release import choose_release
from gym_runtime.package import Package, load_package
from gym_runtime.settings import RuntimeSettings
from gym_runtime.sockets import free_port

STUB_MODEL_NAME = "stub-model"


def uses_policy(merged: MergedConfig, url: str) -> bool:
    """True when an instance is ``policy_model``, refers to it, or holds ``url`` in its config."""
    if "policy_model" in merged.instances or any(
        r.name == "policy_model" and r.server_type == "responses_api_models" for r in merged.refs
    ):
        return True

    def holds(node: Any) -> bool:
        if isinstance(node, dict):
            return any(holds(v) for v in node.values())
        if isinstance(node, list):
            return any(holds(v) for v in node)
        return isinstance(node, str) and url in node

    return any(holds(merged.data.get(name)) for name in merged.instances)


async def configure(
    package: Any,
    overrides: list[str],
    given: PolicyValues,
    say: Callable[[str], None],
    settings: RuntimeSettings,
    job_config: tuple[dict[str, Any], str] | None = None,
    stub_url: str | None = None,
) -> tuple[MergedConfig, str | None]:
    """Load the package (a directory, or a :class:`~gym_runtime.package.Package` already made, e.g.
    by :func:`~gym_runtime.package.bare.package_from_config_paths`), choose the Gym release it runs
    under ``settings`` (once: :func:`~gym_runtime.gym_release.choose_release`) and build its config
    with the job's policy values (module doc). ``job_config`` (``(data, label)``): a config layer
    merged beneath the package's (NeMo Gym's ``initial_global_config_dict``: :mod:`gym_runtime.nemo_gym`;
    in host mode a sandboxed host's global config: :meth:`gym_runtime.host.global_config.HostJob.apply`).
    ``stub_url``: the running stub model's base URL, when the config
    of a running environment is merged again (else a free port is chosen for it). Returns the config
    (``release`` set) and the stub model's base URL (None when no stub is needed). Raises
    :class:`~gym_runtime.gym_release.choose.SdkSkewError` and what
    :func:`~gym_runtime.config.build_config` raises."""
    pkg = package if isinstance(package, Package) else await asyncio.to_thread(load_package, package)
    build_config = functools.partial(_build_config, release=choose_release(pkg, settings), job_config=job_config)
    job = given.with_overrides(overrides)  # `policy_base_url=URL` counts as --policy-base-url URL
    if job.base_url is None:
        stub_url = stub_url or f"http://127.0.0.1:{free_port()}/v1"
        stub = PolicyValues(
            stub_url, given.api_key or "stub-key", job.model_name or STUB_MODEL_NAME, origin="built-in stub model"
        )
        merged = await asyncio.to_thread(build_config, pkg, overrides, stub)
        if uses_policy(merged, stub_url):
            say(
                f"no --policy-base-url: starting the built-in stub model at {stub_url} "
                f"(model {stub.model_name!r}) and pointing policy_model at it"
            )
            return merged, stub_url
        try:
            merged = await asyncio.to_thread(build_config, pkg, overrides, given)
        except ConfigError:  # something needs the policy values after all: keep the stub
            return merged, stub_url
        say(
            "no --policy-base-url, and no policy_model instance or reference to one: the built-in stub model "
            "is not started"
        )
        return merged, None
    defaults = job.keyless_defaults()
    merged = await asyncio.to_thread(build_config, pkg, overrides, given, defaults=defaults)
    if defaults and merged.sources.of("policy_api_key") == "default":
        say(
            f"no policy API key given (--policy-api-key-env VAR or GYM_RUNTIME_POLICY_API_KEY): using "
            f"{KEYLESS_API_KEY!r}, the OpenAI-client convention for a keyless endpoint such as vLLM"
        )
    return merged, None
