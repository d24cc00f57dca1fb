"""A ``nemo_gym`` wheel of a release no line of the runtime knows, made at test time from 0.7.0's.

``stand_in_wheel(out_dir)`` rewrites the ``nemo_gym-0.7.0`` wheel (downloaded once:
:func:`tests.helpers.gym_package.gym_wheel`) as ``nemo_gym-0.8.0``: the ``.dist-info`` renamed, its
``METADATA`` with the new ``Version`` and the ``openai`` / ``ray`` requirements replaced by
``requires`` (by default those of NeMo Gym after 0.7.0 as a test stands them in: ``openai==2.43.0``
behind a marker that holds, Ray only under the ``ray`` extra), and ``RECORD`` rewritten with the new
hashes. Every other file is 0.7.0's, byte for byte, so its servers run as 0.7.0's do.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from tests.helpers.gym_package import gym_wheel, python_312_plus

FROM = "0.7.0"
STAND_IN_REQUIRES = (
    'openai==2.43.0; python_version >= "3.10"',
    'ray[default]>=2.58.0; extra == "ray"',
)


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _metadata(text: str, version: str, requires: tuple[str, ...], extras: tuple[str, ...]) -> str:
    out, added = [], False
    for line in text.splitlines():
        if line.startswith("Version: "):
            line = f"Version: {version}"
        elif line.startswith(("Requires-Dist: openai", "Requires-Dist: ray")):
            if not added:
                out += [f"Requires-Dist: {r}" for r in requires]
                added = True
            continue
        elif line.startswith("Provides-Extra: ") and extras:
            out += [f"Provides-Extra: {e}" for e in extras]
            extras = ()
        out.append(line)
    return "\n".join(out) + "\n"


def stand_in_wheel(
    out_dir: Path,
    version: str = "0.8.0",
    requires: tuple[str, ...] = STAND_IN_REQUIRES,
    extras: tuple[str, ...] = ("ray",),
    drop: tuple[str, ...] = (),
) -> Path:
    """Write ``nemo_gym-<version>-py3-none-any.whl`` into ``out_dir`` (module doc); ``extras``: the
    ``Provides-Extra`` lines added; ``drop``: files of 0.7.0's wheel left out (a module moved away).
    Returns its path. Skips the test without a Python to download 0.7.0's wheel with (pip)."""
    python = python_312_plus()
    if python is None:
        pytest.skip("no Python >= 3.12 under pyenv to download nemo-gym 0.7.0's wheel with")
    src = gym_wheel(python, FROM)
    old, new = f"nemo_gym-{FROM}.dist-info/", f"nemo_gym-{version}.dist-info/"
    out_dir.mkdir(parents=True, exist_ok=True)
    dest = out_dir / f"nemo_gym-{version}-py3-none-any.whl"
    record: list[str] = []
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zout:
        for info in zin.infolist():
            if info.filename in drop or info.filename == old + "RECORD":
                continue
            data = zin.read(info)
            name = new + info.filename[len(old) :] if info.filename.startswith(old) else info.filename
            if name == new + "METADATA":
                data = _metadata(data.decode(), version, requires, extras).encode()
            zout.writestr(zipfile.ZipInfo(name, date_time=info.date_time), data, zipfile.ZIP_DEFLATED)
            record.append(f"{name},{_hash(data)},{len(data)}")
        record.append(f"{new}RECORD,,")
        zout.writestr(new + "RECORD", "\n".join(record) + "\n")
    return dest
