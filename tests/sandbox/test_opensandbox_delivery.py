"""How trees, venvs and work directories reach a server's OpenSandbox sandbox in the shared-volume
mode (sandbox/opensandbox/delivery.py, volume_check.py): the ``pvc`` mounts, the copies of trees
outside the state root, the create body the server receives, and the probe's script and verdicts
(the script run by this host's ``/bin/sh``)."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from opensandbox.adapters.converter.sandbox_model_converter import SandboxModelConverter
from opensandbox.models.sandboxes import SandboxImageSpec

from gym_runtime.errors import SandboxServiceSettingsError, SettingsError
from gym_runtime.settings import opensandbox_connection
from sandbox.limits import ResourceLimits
from sandbox.opensandbox.delivery import HostPaths, SharedVolume, delivery_for
from sandbox.opensandbox.spec import TTL_S, RunLabels, network_policy, resource_limits, sdk_network_policy, sdk_volumes
from sandbox.opensandbox.volume_check import MARKER, create_failure, script, verdict, write_marker
from sandbox.policy import EgressPolicy

CLAIM = "gym-state"


def _pvc(name: str, mount: Path, read_only: bool, sub: str | None = None) -> dict:
    out = {
        "name": name,
        "pvc": {"claimName": CLAIM, "createIfNotExists": False, "deleteOnSandboxTermination": False},
        "mountPath": str(mount),
        "readOnly": read_only,
    }
    return {**out, "subPath": sub} if sub else out


def _sent(volume: dict) -> dict:
    """``volume`` as the SDK 1.1.1 sends it: the PVC's provisioning hints as explicit nulls."""
    return {**volume, "pvc": {**volume["pvc"], "storageClass": None, "storage": None, "accessModes": None}}


def _layout(tmp_path: Path) -> tuple[SharedVolume, SimpleNamespace]:
    """A state root with a venv and a server's work directory, a package outside it, and a spec."""
    root, pkg = tmp_path / "state", tmp_path / "pkg"
    venv, work = root / "venvs" / "v1", root / "runs" / "r1" / "servers" / "arith"
    for d in (venv / "bin", work, pkg / "resources_servers" / "arith"):
        d.mkdir(parents=True)
    (pkg / "resources_servers" / "arith" / "app.py").write_text("print('hi')\n")
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")
    spec = SimpleNamespace(
        name="arith",
        argv=[str(venv / "bin" / "python"), "app.py"],
        cwd=pkg / "resources_servers" / "arith",
        read_only_paths=[pkg, venv, Path("/etc/ssl/certs")],
        writable_paths=[work, tmp_path / "gone"],  # a path that does not exist is left out, as under host paths
    )
    return SharedVolume(CLAIM, root), spec


def test_the_state_root_is_read_only_trees_are_copied_and_work_dirs_are_sub_paths(tmp_path: Path) -> None:
    vol, spec = _layout(tmp_path)
    root, pkg = vol.root, (tmp_path / "pkg").resolve()
    mounts = vol.mounts(spec)
    copy = vol.staged[pkg]
    assert mounts == [
        _pvc("state", root, True),  # venvs, bytecode store: on the volume at the daemon's own path
        _pvc("tree-0", pkg, True, copy),  # the package: its copy on the volume, at the package's path
        _pvc("rw-0", root / "runs/r1/servers/arith", False, "runs/r1/servers/arith"),
    ]
    assert (
        copy.startswith("delivered/")
        and (root / copy / "resources_servers/arith/app.py").read_text() == "print('hi')\n"
    )
    assert vol.mounts(spec) == mounts  # the same copy for a restart's sandbox
    (pkg / "resources_servers/arith/app.py").write_text("print('changed')\n")
    assert SharedVolume(CLAIM, root).stage(pkg) != copy  # a changed tree is a new copy; the old one is left as it is
    assert (root / copy / "resources_servers/arith/app.py").read_text() == "print('hi')\n"
    assert vol.interpreters([spec]) == [str(Path("/usr/bin/python3").resolve())]  # in the image, checked by the probe


def test_a_writable_directory_off_the_volume_is_refused(tmp_path: Path) -> None:
    vol, spec = _layout(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    spec.writable_paths = [tmp_path / "elsewhere"]
    with pytest.raises(SandboxServiceSettingsError) as e:
        vol.mounts(spec)
    assert e.value.code == "GR-OSB-VOLUME-PATH" and str(tmp_path / "elsewhere") in e.value.message
    assert "--work-dir" in e.value.hint


def test_the_mode_comes_from_the_setting(tmp_path: Path) -> None:
    base = {"OPENSANDBOX_DOMAIN": "127.0.0.1:8090"}
    assert isinstance(delivery_for(opensandbox_connection(base, tmp_path)), HostPaths)
    conn = opensandbox_connection({**base, "GYM_RUNTIME_OPENSANDBOX_VOLUME": CLAIM}, tmp_path)
    vol = delivery_for(conn)
    assert isinstance(vol, SharedVolume) and vol.claim == CLAIM and vol.root == tmp_path.resolve()
    assert conn.describe()["delivery"] == "shared volume" and conn.describe()["volume"]["claim"] == CLAIM
    with pytest.raises(SettingsError) as e:
        opensandbox_connection({**base, "GYM_RUNTIME_OPENSANDBOX_VOLUME": "Gym_State"}, tmp_path)
    assert e.value.code == "GR-SETTINGS-OPENSANDBOX"


def test_the_create_body_the_kubernetes_runtime_receives(tmp_path: Path) -> None:
    """The body of ``POST /v1/sandboxes`` for one server, as the SDK 1.1.1 puts it on the wire
    (its own converter, fed what the environment passes to ``Sandbox.create``)."""
    vol, spec = _layout(tmp_path)
    labels = RunLabels("0123456789abcdef", "fedcba9876543210")
    policy = EgressPolicy.from_environ({}, ["http://10.0.0.5:8000/v1"])
    body = SandboxModelConverter.to_api_create_sandbox_request(
        spec=SandboxImageSpec(image="registry.example/gym-runtime:1"),
        entrypoint=["tail", "-f", "/dev/null"],
        env={},
        metadata=labels.metadata(spec.name),
        timeout=timedelta(seconds=TTL_S),
        resource=resource_limits(ResourceLimits(memory_mb=2048), "1"),
        platform=None,
        network_policy=sdk_network_policy(network_policy(policy, ["10.244.1.7"])),
        extensions={},
        volumes=sdk_volumes(vol.mounts(spec)),
    ).to_dict()
    root, pkg = vol.root, (tmp_path / "pkg").resolve()
    assert body == {
        "image": {"uri": "registry.example/gym-runtime:1"},
        "entrypoint": ["tail", "-f", "/dev/null"],
        "resourceLimits": {"cpu": "1", "memory": "2048Mi"},
        "metadata": {
            "gym-runtime-run": "0123456789abcdef",
            "gym-runtime-owner": "fedcba9876543210",
            "gym-runtime-server": "arith",
        },
        "timeout": 600,
        "networkPolicy": {
            "defaultAction": "deny",
            "egress": [
                {"action": "allow", "target": "10.244.1.7/32"},  # the daemon's pod IP
                {"action": "allow", "target": "10.0.0.5/32"},
            ],
        },
        "secureAccess": False,
        "volumes": [
            _sent(_pvc("state", root, True)),  # one pod volume of the claim (read-write: one mount is)
            _sent(_pvc("tree-0", pkg, True, vol.staged[pkg])),  # volumeMounts with subPath on Kubernetes
            _sent(_pvc("rw-0", root / "runs/r1/servers/arith", False, "runs/r1/servers/arith")),
        ],
    }


def _probe(root: Path, interpreters: list[str]) -> str:
    return subprocess.run(["/bin/sh", "-c", script(str(root), interpreters)], capture_output=True, text=True).stdout


def test_the_probe_script_and_its_verdicts(tmp_path: Path) -> None:
    vol = SharedVolume(CLAIM, tmp_path / "state")
    token = write_marker(vol)
    assert (vol.root / MARKER).read_text().strip() == token
    ok = _probe(vol.root, ["/bin/sh"])
    assert verdict(ok, token, vol, "img") is None, ok

    missing = verdict(_probe(vol.root, ["/bin/sh", "/opt/none/bin/python3.11"]), token, vol, "img:1")
    assert missing is not None and missing.code == "GR-OSB-INTERPRETER"
    assert "/opt/none/bin/python3.11" in missing.message and "'img:1'" in missing.message
    assert "GYM_RUNTIME_PYTHON" in missing.hint

    other = verdict(_probe(tmp_path, []), token, vol, "img")  # another volume: no marker there
    assert other is not None and other.code == "GR-OSB-VOLUME" and "marker missing" in (other.cause or "")
    assert CLAIM in other.message

    unreadable = verdict("root unreadable: Permission denied\nmarker missing\n", token, vol, "img")
    assert unreadable is not None and unreadable.code == "GR-OSB-VOLUME-UNREADABLE"


def test_a_probe_that_never_becomes_ready_names_the_volume(tmp_path: Path) -> None:
    """Kubernetes makes the pod of a missing claim and leaves it Pending: the SDK's ready timeout."""
    from opensandbox.exceptions import SandboxReadyTimeoutException

    conn = opensandbox_connection(
        {"OPENSANDBOX_DOMAIN": "10.0.0.9:8080", "GYM_RUNTIME_OPENSANDBOX_VOLUME": CLAIM}, tmp_path
    )
    err = create_failure(SandboxReadyTimeoutException("not ready in 120s"), conn, delivery_for(conn), "probing", None)
    assert isinstance(err, SandboxServiceSettingsError) and err.code == "GR-OSB-VOLUME"
    assert f"{CLAIM!r}" in err.message and "Pending" in (err.cause or "")
