"""The shared volume, checked from a sandbox before any server starts (docs/runtime.md, "Delivery
modes"): :func:`run` writes a marker file with a fresh token at the state root, makes one probe
sandbox with the volume mounted as servers get it (read-only at the state root), and runs
:func:`script` in it: can the sandbox list the state root, read the marker, and run each
interpreter the venvs point at that is not on the volume. The probe sandbox is deleted whatever
the outcome; each failure is one block (exit 1):

* ``GR-OSB-VOLUME``: the server has no volume of that claim name (docker runtime:
  ``VOLUME::PVC_NOT_FOUND``), or the sandbox's volume is another one (no marker, or another token);
* ``GR-OSB-VOLUME-UNREADABLE``: the sandbox cannot list the state root or read the marker;
* ``GR-OSB-INTERPRETER``: an interpreter is neither under the state root nor in the image.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shlex
import time
from datetime import timedelta
from typing import Any

from gym_runtime.errors import SandboxServiceSettingsError

from .failures import translate
from .spec import sdk_network_policy, sdk_volumes

MARKER = ".gym-runtime-volume-check"
PROBE_SERVER = "volume-check"  # the probe sandbox's server label (deleted with the run's sandboxes too)
PROBE_TTL_S = 60  # the server's shortest TTL: a probe a dead daemon left goes within a minute
RUN_TIMEOUT_S = 60.0
NOT_FOUND = ("VOLUME::PVC_NOT_FOUND",)  # opensandbox-server 1.1.1, services/constants.py


def write_marker(volume: Any) -> str:
    """Write a fresh token to the marker at ``volume``'s state root (to a temporary name, then
    renamed); returns the token (32 hex digits)."""
    token = secrets.token_hex(16)
    volume.root.mkdir(parents=True, exist_ok=True)
    tmp = volume.root / f"{MARKER}.{token[:8]}"
    tmp.write_text(token + "\n")
    tmp.chmod(0o644)
    tmp.replace(volume.root / MARKER)
    return token


def script(root: str, interpreters: list[str]) -> str:
    """The probe's ``/bin/sh`` script: prints ``root ok`` or ``root unreadable: <error>``, then
    ``marker <token>``, ``marker unreadable: <error>`` or ``marker missing``, then
    ``interpreter ok|missing <path>`` for each of ``interpreters``."""
    r, m = shlex.quote(root), shlex.quote(f"{root}/{MARKER}")
    lines = [
        f'if e=$(ls {r} 2>&1 >/dev/null); then echo "root ok"; else echo "root unreadable: $e"; fi',
        f'if t=$(cat {m} 2>/dev/null); then echo "marker $t"; '
        f'elif [ -e {m} ]; then echo "marker unreadable: $(cat {m} 2>&1)"; else echo "marker missing"; fi',
    ]
    for p in interpreters:
        q = shlex.quote(p)
        lines.append(f'if [ -x {q} ]; then echo "interpreter ok {p}"; else echo "interpreter missing {p}"; fi')
    return "\n".join(lines)


def verdict(output: str, token: str, volume: Any, image: str) -> SandboxServiceSettingsError | None:
    """The error the probe's ``output`` (:func:`script`'s lines) means, None when all is well;
    ``token``: the marker's, ``image``: the sandbox image (named by ``GR-OSB-INTERPRETER``)."""
    lines = output.splitlines()
    where = f"volume {volume.claim!r} (GYM_RUNTIME_OPENSANDBOX_VOLUME), mounted at {volume.root}"
    for line in lines:
        if line.startswith(("root unreadable", "marker unreadable")):
            return SandboxServiceSettingsError(
                f"sandboxes cannot read the shared {where}",
                code="GR-OSB-VOLUME-UNREADABLE",
                cause=f"in a probe sandbox: {line}",
                hint="let the sandboxes' user read it: files the daemon writes there must be readable by "
                "that uid (on Kubernetes the pod's fsGroup or runAsUser, the volume's mode), or unset "
                "GYM_RUNTIME_OPENSANDBOX_VOLUME",
            )
    if f"marker {token}" not in lines:
        seen = next((ln for ln in lines if ln.startswith("marker")), "no answer")
        return SandboxServiceSettingsError(
            f"the {where} is not the volume the daemon sees there: a marker file the daemon wrote at "
            f"{volume.root}/{MARKER} is not in the sandbox's",
            code="GR-OSB-VOLUME",
            cause=f"in a probe sandbox: {seen}",
            hint="set GYM_RUNTIME_OPENSANDBOX_VOLUME to the claim of the volume mounted at GYM_RUNTIME_HOME "
            "in the daemon's pod (`kubectl get pod <pod> -o yaml`: its volumes' claimName), or set "
            "GYM_RUNTIME_HOME to where that claim is mounted",
        )
    missing = [ln.split(" ", 2)[2] for ln in lines if ln.startswith("interpreter missing ")]
    if missing:
        return SandboxServiceSettingsError(
            f"the interpreter {missing[0]} the venvs point at is neither on the shared volume "
            f"({volume.root}) nor in the sandbox image {image!r}",
            code="GR-OSB-INTERPRETER",
            cause="missing in a probe sandbox: " + ", ".join(missing),
            hint="use an image that holds it at the same path (GYM_RUNTIME_OPENSANDBOX_IMAGE; Debian 12's "
            "/usr/bin/python3.11 for GYM_RUNTIME_PYTHON=/usr/bin/python3.11), or set GYM_RUNTIME_PYTHON "
            "to an interpreter under GYM_RUNTIME_HOME, then build again",
        )
    return None


def create_failure(exc: BaseException, conn: Any, volume: Any, what: str, sandbox: str | None) -> Exception:
    """The error for ``exc`` (an SDK exception) raised while making or using the probe sandbox:
    ``GR-OSB-VOLUME`` when the server has no such volume (docker runtime: ``VOLUME::PVC_NOT_FOUND``)
    or the sandbox never became ready (Kubernetes: a claim missing from the namespace leaves its
    pod ``Pending``), else :func:`~.failures.translate`'s."""
    from opensandbox.exceptions import SandboxReadyTimeoutException

    err = getattr(exc, "error", None)
    hint = (
        "set it to the claim of the volume mounted at GYM_RUNTIME_HOME in the daemon's pod (a "
        "ReadWriteMany PVC in the sandboxes' namespace; a named volume under a docker runtime)"
    )
    if getattr(err, "code", None) in NOT_FOUND:
        return SandboxServiceSettingsError(
            f"the OpenSandbox server {conn.url} has no volume {volume.claim!r} (GYM_RUNTIME_OPENSANDBOX_VOLUME)",
            code="GR-OSB-VOLUME",
            cause=getattr(err, "message", None) or str(exc),
            hint=hint,
        )
    if isinstance(exc, SandboxReadyTimeoutException):
        return SandboxServiceSettingsError(
            f"a probe sandbox given the volume {volume.claim!r} (GYM_RUNTIME_OPENSANDBOX_VOLUME) on the "
            f"OpenSandbox server {conn.url} never became ready",
            code="GR-OSB-VOLUME",
            cause=f"{exc}; on Kubernetes a claim missing from the sandboxes' namespace leaves the pod Pending",
            hint=hint + "; `kubectl describe pod` of the sandbox says why it waits",
        )
    return translate(exc, conn, what, sandbox)


async def _output(box: Any, command: str) -> str:
    """Run ``command`` with ``/bin/sh`` in the background in ``box`` and return its stdout."""
    from opensandbox.models.execd import RunCommandOpts

    run = await box.commands.run(["/bin/sh", "-c", command], opts=RunCommandOpts(background=True))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        status = await box.commands.get_command_status(run.id)
        if status.running is False:
            break
        await asyncio.sleep(0.1)
    return (await box.commands.get_background_command_logs(run.id, None)).content or ""


async def run(env: Any, volume: Any, interpreters: list[str]) -> None:
    """The check (module doc) for environment ``env``
    (:class:`~.environment.OpenSandboxEnvironment`: its service, connection, labels and network
    policy) on ``volume`` (:class:`~.delivery.SharedVolume`); ``interpreters``: paths to find in
    the image. Raises the module's blocks, other ``GR-OSB-*`` for the server's other failures."""
    from opensandbox import Sandbox

    token = await asyncio.to_thread(write_marker, volume)
    conn, what = env.conn, f"checking the shared volume {volume.claim!r} in a probe sandbox"
    box = None
    try:
        box = await Sandbox.create(
            conn.image,
            timeout=timedelta(seconds=PROBE_TTL_S),
            ready_timeout=timedelta(seconds=120),
            metadata=env.labels.metadata(PROBE_SERVER),
            network_policy=sdk_network_policy(env.policy_wire) if env.policy_wire is not None else None,
            volumes=sdk_volumes([volume.root_mount()]),
            connection_config=conn.sdk_config(conn.create_timeout_s),
        )
        output = await _output(box, script(str(volume.root), interpreters))
    except Exception as e:
        raise create_failure(e, conn, volume, what, getattr(box, "id", None)) from None
    finally:
        if box is not None:
            with contextlib.suppress(Exception):
                await env.service.kill([box.id], f"deleting the probe sandbox {box.id}")
            with contextlib.suppress(Exception):
                await box.close()
        with contextlib.suppress(OSError):
            (volume.root / MARKER).unlink()
    err = verdict(output, token, volume, str(conn.image))
    if err is not None:
        raise err
