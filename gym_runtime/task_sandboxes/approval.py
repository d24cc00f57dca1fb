"""Which images task sandboxes on the operator's OpenSandbox server may run: fail closed
(docs/runtime.md, "Task sandboxes on an OpenSandbox server").

``GYM_RUNTIME_OPENSANDBOX_TASK_IMAGES`` (read by ``gym_runtime.settings``) is a comma list of
approved images (``registry.example/swe/task:1``, matched exactly) and approved prefixes (an entry
ending in ``/``: ``registry.example/swe/`` approves every image under it), as NMP's episode
broker's ``approved_images`` / ``approved_image_prefixes``. Unset or empty, no image is approved and
every create is refused. Images are compared as written, never normalised: ``python:3.12`` is not
``docker.io/library/python:3.12``, so an operator lists the spelling the configs use.

The check runs twice:

* where the config is resolved (:func:`config_problems`, called by
  :func:`gym_runtime.config.build_config`, so ``validate``, ``config`` and every start refuse it):
  each image a server's config names (a string under a key ``image`` or ``*_image`` in the block
  of a server that uses a kept ``opensandbox`` provider block) must be approved, and a server
  using such a block with nothing approved at all is refused, since every create would be;
* for every create at run time, by the daemon's gate (:mod:`.osb_gate`): the provider picks the
  image per call (``SandboxSpec.image``, often per dataset row), so no static check can see them
  all; the gate holds the only credential to the server, so nothing reaches the server without it.

Both refuse with ``GR-CONFIG-TASK-IMAGE`` (the config's) or ``GR-SANDBOX-TASK-IMAGE-DENIED`` (the
gate's answer), naming the server, the image and the setting to change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gym_runtime.errors import Violation

SETTING = "GYM_RUNTIME_OPENSANDBOX_TASK_IMAGES"
# an image reference as registries and OpenSandbox take it: no spaces, no control characters,
# no empty or parent path component
_REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$")


def well_formed(image: str) -> bool:
    """Whether ``image`` looks like an image reference (no ``..`` or ``//``, no space)."""
    return bool(_REFERENCE.match(image)) and ".." not in image and "//" not in image and len(image) <= 512


@dataclass(frozen=True)
class ApprovedImages:
    """``images`` (exact) and ``prefixes`` (each ending in ``/``) the operator approved."""

    images: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: str) -> ApprovedImages:
        """The setting's comma list; raises ValueError naming a bad entry (a wildcard, a space, a
        ``..`` component, a bare ``/``)."""
        images, prefixes = set(), []
        for entry in (e.strip() for e in raw.split(",")):
            if not entry:
                continue
            if "*" in entry:
                raise ValueError(f"entry {entry!r} has a wildcard; approve a prefix instead (an entry ending in '/')")
            if not well_formed(entry.rstrip("/")) or entry.startswith("/"):
                raise ValueError(f"entry {entry!r} is not an image reference or a prefix ending in '/'")
            (prefixes.append(entry) if entry.endswith("/") else images.add(entry))
        return cls(frozenset(images), tuple(dict.fromkeys(prefixes)))

    def __bool__(self) -> bool:
        return bool(self.images or self.prefixes)

    def approves(self, image: Any) -> bool:
        """Whether ``image`` (a string) may run: listed exactly, or under a listed prefix."""
        if not isinstance(image, str) or not well_formed(image):
            return False
        return image in self.images or any(image.startswith(p) for p in self.prefixes)

    def describe(self) -> str:
        """The approved list as one phrase, for messages."""
        if not self:
            return "nothing (unset)"
        return ", ".join([*sorted(self.images), *self.prefixes])


def _images(node: Any, path: str) -> list[tuple[str, str]]:
    """``(dotted key, image)`` for each string under a key ``image`` / ``*_image`` in ``node``."""
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            key = f"{path}.{k}" if path else str(k)
            if isinstance(k, str) and (k == "image" or k.endswith("_image")) and isinstance(v, str) and v:
                found.append((key, v))
            else:
                found += _images(v, key)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _images(v, f"{path}[{i}]")
    return found


def config_problems(data: dict[str, Any], instances: Any, sources: Any, settings: Any) -> list[Violation]:
    """``GR-CONFIG-TASK-IMAGE`` violations of the resolved config ``data`` under ``settings``
    (module doc); none when no OpenSandbox server is configured or ``GYM_RUNTIME_SANDBOX_PROVIDER``
    is ``gym_runtime`` (the blocks are then rewritten, :mod:`.offer`)."""
    from gym_runtime.task_sandboxes.offer import OSB, keeps_opensandbox, provider_blocks

    conn = getattr(settings, "opensandbox", None)
    mode = settings.task_sandboxes.provider_mode if getattr(settings, "task_sandboxes", None) else "auto"
    if conn is None or not keeps_opensandbox(mode, conn.url):
        return []
    approved: ApprovedImages = conn.task_images
    hint = (
        f"add the image, or a prefix of it ending in '/', to {SETTING} (comma-separated; now: "
        f'{approved.describe()}); docs/runtime.md, "Task sandboxes on an OpenSandbox server"'
    )
    out: list[Violation] = []
    for block in provider_blocks(data, instances):
        if block.provider != OSB:
            continue
        for inst in block.users:
            named = _images(data.get(inst), inst)
            for key, image in named:
                if not approved.approves(image):
                    out.append(
                        Violation(
                            "GR-CONFIG-TASK-IMAGE",
                            f"server {inst!r} makes its task sandboxes on "
                            f"the OpenSandbox server {conn.url} (provider block {block.path}), but "
                            f"image {image!r} is not approved by {SETTING}",
                            file=sources.of(key),
                            key=key,
                            hint=hint,
                        )
                    )
            if not named and not approved:
                out.append(
                    Violation(
                        "GR-CONFIG-TASK-IMAGE",
                        f"server {inst!r} makes its task sandboxes on the "
                        f"OpenSandbox server {conn.url} (provider block {block.path}), but {SETTING} "
                        "approves no image, so every sandbox it asks for would be refused",
                        file=sources.of(block.path),
                        key=block.path,
                        hint=hint,
                    )
                )
    return out
