"""The pure parts of many sandbox creates at once (sandbox/opensandbox/creates.py): the gate's
bound and rate, which failures are tried again, which listed sandbox is adopted; the settings
that bound it (gym_runtime/settings.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from opensandbox.exceptions import SandboxApiException, SandboxConnectionException, SandboxTimeoutException

from gym_runtime.errors import SettingsError
from gym_runtime.settings import opensandbox_connection
from sandbox.opensandbox.creates import CreateGate, adoptable, backoff_s, outcome


def test_the_gate_holds_at_most_in_flight_creates_at_once() -> None:
    async def run() -> int:
        gate = CreateGate(3, 1000.0)

        async def create() -> None:
            async with gate.slot():
                await asyncio.sleep(0.02)

        await asyncio.gather(*(create() for _ in range(20)))
        return gate.max_seen

    assert asyncio.run(run()) == 3


def test_the_gate_spaces_starts_by_the_rate() -> None:
    now = [0.0]
    starts: list[float] = []

    async def fake_sleep(s: float) -> None:
        now[0] += s

    async def run() -> None:
        gate = CreateGate(100, 4.0, clock=lambda: now[0], sleep=fake_sleep)

        async def create() -> None:
            async with gate.slot():
                starts.append(now[0])

        await asyncio.gather(*(create() for _ in range(9)))

    asyncio.run(run())
    assert starts == [i * 0.25 for i in range(9)]  # 4 per second, the first at once


@pytest.mark.parametrize("bad", [(0, 1.0), (2, 0.0)])
def test_the_gate_refuses_no_bound(bad: tuple[int, float]) -> None:
    with pytest.raises(ValueError):
        CreateGate(*bad)


def _api(status: int) -> SandboxApiException:
    return SandboxApiException(f"HTTP {status}", status_code=status)


@pytest.mark.parametrize(
    "exc, code, expected",
    [
        (_api(500), "GR-OSB-SERVER", "retry"),
        (_api(502), "GR-OSB-SERVER", "retry"),
        (_api(503), "GR-OSB-SERVER", "retry"),
        (_api(504), "GR-OSB-SERVER", "adopt"),  # a gateway's timeout: the sandbox may exist
        (SandboxTimeoutException("Request timed out: ReadTimeout"), "GR-OSB-UNREACHABLE", "adopt"),
        (_api(500), "GR-OSB-IMAGE", "fail"),  # a 5xx naming a setting is not tried again
        (_api(400), "GR-OSB-SERVER", "fail"),
        (_api(429), "GR-OSB-QUOTA", "fail"),
        (SandboxConnectionException("Network connectivity error"), "GR-OSB-UNREACHABLE", "fail"),
    ],
)
def test_what_is_tried_again_and_what_is_looked_for_first(exc: BaseException, code: str, expected: str) -> None:
    assert outcome(exc, code) == expected


def test_backoff_doubles_to_a_cap_with_a_spread() -> None:
    assert [backoff_s(a, rand=lambda: 0.0) for a in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert backoff_s(0, rand=lambda: 1.0) == 1.25


def _info(sid: str, state: str) -> SimpleNamespace:
    return SimpleNamespace(id=sid, status=SimpleNamespace(state=state))


def test_a_running_sandbox_nobody_uses_is_adopted_and_other_unused_ones_are_strays() -> None:
    infos = [_info("a", "Failed"), _info("b", "Pending"), _info("c", "Running"), _info("d", "Running")]
    assert adoptable(infos, known=["d"]) == ("c", ["b"])
    assert adoptable([_info("b", "Pending")], known=[]) == ("b", [])


def test_nothing_to_adopt_when_every_listed_sandbox_ended_or_is_in_use() -> None:
    infos = [_info("a", "Stopping"), _info("b", "Terminated"), _info("c", "Running")]
    assert adoptable(infos, known=["c"]) == (None, [])
    assert adoptable([], known=[]) == (None, [])


def test_the_bound_is_read_from_two_settings() -> None:
    base = {"OPENSANDBOX_DOMAIN": "127.0.0.1:8090"}
    conn = opensandbox_connection(base)
    assert (conn.creates_in_flight, conn.creates_per_s) == (8, 4.0)
    conn = opensandbox_connection(
        {**base, "GYM_RUNTIME_OPENSANDBOX_CREATES_IN_FLIGHT": "16", "GYM_RUNTIME_OPENSANDBOX_CREATES_PER_S": "0.5"}
    )
    assert (conn.creates_in_flight, conn.creates_per_s) == (16, 0.5)


@pytest.mark.parametrize(
    "name, value",
    [
        ("GYM_RUNTIME_OPENSANDBOX_CREATES_IN_FLIGHT", "0"),
        ("GYM_RUNTIME_OPENSANDBOX_CREATES_IN_FLIGHT", "2.5"),
        ("GYM_RUNTIME_OPENSANDBOX_CREATES_PER_S", "-1"),
        ("GYM_RUNTIME_OPENSANDBOX_CREATES_PER_S", "fast"),
    ],
)
def test_a_bad_bound_is_a_settings_error(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as e:
        opensandbox_connection({"OPENSANDBOX_DOMAIN": "127.0.0.1:8090", name: value})
    assert e.value.code == "GR-SETTINGS-OPENSANDBOX" and name in e.value.message and repr(value) in e.value.message
