"""Choose the Gym release an environment runs: the operator's pin, or the SDK wheel it vendors.

Rule (docs/runtime.md, "Gym releases"): a wheels-v1 package that vendors ``nemo_gym-X.whl`` runs
release X, whose ``METADATA`` (``Requires-Python``, the ``openai`` and ``ray[default]``
requirements) is read from the wheel; a ``GYM_RUNTIME_PIN_NEMO_GYM`` the operator set must then
be X too (the training image's SDK is the one the package was vendored for). Without a vendored
SDK the pin decides: the operator's, else the runtime's default, the current release.
"""

from __future__ import annotations

import zipfile
from email.parser import Parser
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from gym_runtime.errors import SettingsError, UserError, Violation
from gym_runtime.gym_release.lines import release_for
from gym_runtime.known_releases import CURRENT, KnownRelease, known_release

if TYPE_CHECKING:
    from gym_runtime.gym_release.base import GymRelease
    from gym_runtime.package import Package, WheelFile
    from gym_runtime.settings import RuntimeSettings


class SdkSkewError(UserError):
    """The Gym SDK an environment needs is not the one it would get: a vendored ``nemo_gym`` wheel
    whose version differs from the operator's pin (exit 1)."""

    code = "GR-SDK-SKEW"


def vendored_sdk(package: Package) -> WheelFile | None:
    """The ``nemo_gym`` wheel in the package's ``wheels/``, or None."""
    return next((w for w in package.wheels if w.name == canonicalize_name("nemo-gym")), None)


def wheel_metadata(wheel: WheelFile) -> KnownRelease:
    """``Requires-Python`` and the ``openai`` / ``ray`` requirements of a vendored ``nemo_gym`` wheel,
    read from its ``METADATA``; a field the wheel lacks or that cannot be read falls back to the
    table of known releases (for a release of an unknown line: to "not known", never another
    release's figures, :func:`~gym_runtime.known_releases.known_release`).

    Each ``Requires-Dist`` marker is evaluated with ``packaging`` (this host's environment): a
    requirement whose marker holds without an extra is the release's own; ``ray`` found only under an
    extra (``ray[default]>=2.58; extra == "ray"``) is recorded as that extra (``ray_extra``), the
    release then giving Ray only to servers that ask for it."""
    table = known_release(wheel.version)
    try:
        with zipfile.ZipFile(wheel.path) as z:
            name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            meta = Parser().parsestr(z.read(name).decode("utf-8", "replace"), headersonly=True)
    except (OSError, zipfile.BadZipFile, StopIteration, KeyError):
        return table
    own: dict[str, str] = {}
    extra_ray: dict[str, str] = {}  # extra -> the ray requirement under it
    extras = [canonicalize_name(e) for e in meta.get_all("Provides-Extra") or []]
    for line in meta.get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        name = canonicalize_name(req.name)
        if name not in ("openai", "ray"):
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            own.setdefault(name, str(req.specifier))
        elif name == "ray":
            for extra in extras:
                if req.marker.evaluate({"extra": extra}):
                    extra_ray.setdefault(extra, str(req.specifier))
    ray_extra = None
    if "ray" not in own and extra_ray:  # Gym's own `ray` extra first, else the first extra with Ray
        ray_extra = "ray" if "ray" in extra_ray else next(iter(extra_ray))
        own["ray"] = extra_ray[ray_extra]
    openai = own.get("openai", table.openai)
    exact = openai[2:] if openai.startswith("==") and "," not in openai else table.default_openai
    return KnownRelease(
        str(wheel.version),
        meta.get("Requires-Python") or table.requires_python,
        openai,
        own.get("ray", table.ray),
        exact,
        ray_extra,
        f"wheels/{wheel.filename}",
    )


def choose_release(package: Package | None, settings: RuntimeSettings) -> GymRelease:
    """The profile of the Gym release ``package`` runs under ``settings`` (module doc).

    Raises :class:`SdkSkewError` when a vendored ``nemo_gym`` wheel and an explicit pin disagree,
    and :class:`~gym_runtime.errors.SettingsError` for a pin that is not a version.
    """
    pin, origin = settings.pins.get("nemo-gym"), settings.pin_origins.get("nemo-gym", "")
    wheel = vendored_sdk(package) if package is not None else None
    if wheel is not None:
        rel = f"wheels/{wheel.filename}"
        if settings.pin_explicit("nemo-gym") and pin and Version(pin) != wheel.version:
            raise SdkSkewError(
                f"the package vendors nemo-gym {wheel.version} ({rel}) but the image pins nemo-gym {pin} ({origin})",
                violations=[
                    Violation("GR-SDK-SKEW", f"vendors nemo-gym {wheel.version}; the pin is {pin} ({origin})", file=rel)
                ],
                hint=f"vendor the package again for nemo-gym {pin} (`gym-runtime vendor PKG --platform ... "
                f"--python ...` with GYM_RUNTIME_PIN_NEMO_GYM={pin}), or run it where the image ships nemo-gym "
                f"{wheel.version} (GYM_RUNTIME_PIN_NEMO_GYM={wheel.version})",
            )
        return release_for(wheel.version, rel, wheel_metadata(wheel))
    if not pin:
        return release_for(CURRENT, "the runtime's default")
    try:
        version = Version(pin)
    except InvalidVersion:
        raise SettingsError(
            f"GYM_RUNTIME_PIN_NEMO_GYM={pin!r} is not a version",
            code="GR-SETTINGS-PIN",
            hint="set an exact release such as 0.7.0, or unset it for the current release",
        ) from None
    return release_for(version, origin or "the runtime's pin settings")
