"""The namespace holder / socket factory (sandbox/netns.py): sockets made inside stay inside."""

from __future__ import annotations

import socket

import pytest

from sandbox.netns import HolderError, NetnsHolder
from tests.helpers.daemon import running


@pytest.fixture
def holder(full_available):
    if not full_available:
        pytest.skip("no user+network namespaces here")
    h = NetnsHolder.start()
    yield h
    h.close()


def test_listen_and_dial_inside_only(holder):
    lsock = holder.listen("127.0.0.1", 0)
    lsock.setblocking(True)
    port = lsock.getsockname()[1]
    assert not holder.port_free(port) and holder.port_free(20000)
    inside = holder.socket()
    inside.setblocking(True)
    inside.connect(("127.0.0.1", port))  # an unconnected socket from the factory dials inside the namespace
    conn, _ = lsock.accept()
    assert inside.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    for s in (conn, inside, lsock):
        s.close()


def test_ip_literal_endpoint_address_lives_on_namespace_lo(holder):
    holder.add_address("10.200.0.1")  # only on the namespace's lo: no packet can leave it
    lsock = holder.listen("10.200.0.1", 9000)
    c = holder.socket()
    c.setblocking(True)
    c.settimeout(2)
    c.connect(("10.200.0.1", 9000))
    c.close()
    lsock.close()


def test_holder_gone_after_close(full_available):
    if not full_available:
        pytest.skip("no user+network namespaces here")
    h = NetnsHolder.start()
    pid = h.pid
    h.close()
    assert h.proc.returncode is not None
    with pytest.raises((HolderError, OSError)):
        h.port_free(20000)
    assert not running(pid)


def test_footprint_leaves_out_the_holders_pool_and_counts_the_sockets_in_use(holder):
    """The reliability tests' fd count (tests/helpers/load.py) must not move with the holder's pool
    of 32 unbound sockets, or a refill reads as a leak of up to 32 fds; sockets in use still count."""
    import os

    from tests.helpers.load import footprint, unbound_sockets

    base, pooled = footprint(os.getpid())["fds"], unbound_sockets(os.getpid())
    lsock = holder.listen("127.0.0.1", 0)
    lsock.setblocking(True)
    inside = holder.socket()  # the first refill: 32 unbound sockets, one handed out
    assert unbound_sockets(os.getpid()) == pooled + 32
    assert footprint(os.getpid())["fds"] == base + 1  # the listener; the pool is not counted
    inside.setblocking(True)
    inside.connect(lsock.getsockname())
    conn, _ = lsock.accept()
    assert footprint(os.getpid())["fds"] == base + 3  # listener, both ends of the connection
    assert unbound_sockets(os.getpid()) == pooled + 31
    for s in (conn, inside, lsock):
        s.close()
