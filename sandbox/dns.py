"""Egress for clients that ignore proxy variables: a DNS stub and per-name forwards in a network namespace.

Some clients never read ``HTTP(S)_PROXY``: aiohttp without ``trust_env`` (NeMo Gym's own
``ClientSession``, 0.4.0 and 0.7.0 ``nemo_gym/server_utils.py``), raw sockets, gRPC, Node's
undici. In a sandbox network they resolve the name themselves and connect directly. The network
has no route out, so without this module they fail with "Temporary failure in name resolution"
and nothing says which server wanted which host (case C47). Here the namespace's resolver
(``resolv.conf`` names a stub address inside it) is answered by the daemon:

* a name the egress allowlist permits (:meth:`EgressPolicy.ports_for`) is resolved by the daemon,
  every address checked (special ranges refused, as for the proxy), and answered with a loopback
  address of its own (``127.<subnet>.<client>.<n>``, one per client and name, TTL 30 s), on which
  the daemon listens at each allowed port and splices every connection to a checked address of the
  name, resolved again when it connects (``egress ALLOW ... via=dns`` in the log);
* the sandbox's own names (``localhost`` and :data:`~sandbox.launch.SANDBOX_HOSTNAME`, which its
  ``/etc/hosts`` maps too) are answered ``127.0.0.1``, for clients that skip ``/etc/hosts``;
* any other name is answered ``NXDOMAIN`` and logged as a denial naming the client (the server or
  task sandbox that asked), the host and the rule, ``via=dns`` (the ``on_deny`` callback gets
  ``{"server", "host", "port": None, "rule", "via": "dns"}``: a lookup has no port);
* a name the allowlist permits that does not resolve on the host is no denial: it is answered
  ``SERVFAIL`` (the host's resolver failed) or ``NXDOMAIN`` (no address) and logged as such;
* ``AAAA`` answers are empty (clients fall back to IPv4); other types are answered empty.

Messages are parsed and built with dnspython (RFC 1035). TLS is not touched: the client speaks TLS
to the real host through the splice, with the name it asked for as SNI.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any, cast

from .launch import SANDBOX_HOSTNAME
from .policy import EgressPolicy
from .proxy import Resolver, host_dial, serve_forward, system_resolve

log = logging.getLogger("sandbox.egress")
TTL_S = 30
MAX_NAMES = 250  # per client: the last octet of its addresses
OWN_NAMES = frozenset({"localhost", SANDBOX_HOSTNAME})  # answered 127.0.0.1, as the sandbox's /etc/hosts does


class NameForwards:
    """The DNS answers and forwards of one network namespace. ``listen(ip, port)`` makes a
    listening TCP socket inside it (or an awaitable of one); ``subnet`` is the second octet of the answered addresses."""

    def __init__(
        self,
        policy: EgressPolicy,
        on_deny: Callable[[dict], None],
        listen: Callable[[str, int], Any],
        resolver: Resolver | None = None,
        subnet: int = 2,
    ) -> None:
        self.policy, self.on_deny, self.listen, self.resolver, self.subnet = policy, on_deny, listen, resolver, subnet
        self._clients: dict[str, int] = {}
        self._names: dict[tuple[str, str], str] = {}
        self._servers: list[asyncio.AbstractServer] = []
        self._transports: list[asyncio.BaseTransport] = []

    async def serve(self, sock: socket.socket, client: str) -> None:
        """Answer the queries that reach the bound UDP ``sock`` as coming from ``client``."""
        loop = asyncio.get_running_loop()
        self._clients.setdefault(client, len(self._clients) + 1)
        owner = self

        class _Protocol(asyncio.DatagramProtocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                # a datagram endpoint's (uvloop's UDPTransport has sendto but is no DatagramTransport subclass)
                self.transport = cast(asyncio.DatagramTransport, transport)

            def datagram_received(self, data: bytes, addr) -> None:
                def send(task: asyncio.Task) -> None:
                    if not task.cancelled() and task.exception() is None and task.result():
                        self.transport.sendto(task.result(), addr)

                loop.create_task(owner._reply(data, client)).add_done_callback(send)

        transport, _ = await loop.create_datagram_endpoint(_Protocol, sock=sock)
        self._transports.append(transport)

    async def _resolve(self, host: str) -> list[str]:
        if self.resolver is None:
            return [a for a in await system_resolve(host) if ":" not in a]
        out = self.resolver(host)
        return list(await out) if isinstance(out, Awaitable) else list(out)

    def _deny(self, client: str, host: str, rule: str, port: int | None = None) -> None:
        """One denial: of a lookup (``port`` None) or of a connection to a forward (its port)."""
        if port is None:
            log.warning(
                "egress DENY server=%s host=%s rule=%s via=dns (a DNS lookup by a client that resolves "
                "names itself instead of asking HTTPS_PROXY)",
                client,
                host,
                rule,
            )
        else:
            log.warning("egress DENY server=%s host=%s port=%s rule=%s via=dns", client, host, port, rule)
        self.on_deny({"server": client, "host": host, "port": port, "rule": rule, "via": "dns"})

    async def _reply(self, data: bytes, client: str) -> bytes | None:
        # dnspython loads at the first lookup, not with the daemon (~5 % of what `up` imported before it starts)
        import dns.flags
        import dns.message
        import dns.rcode
        import dns.rdata
        import dns.rdataclass
        import dns.rdatatype
        import dns.rrset

        try:
            query = dns.message.from_wire(data)
        except Exception:
            return None
        resp = dns.message.make_response(query)
        resp.flags |= dns.flags.RA
        if not query.question:
            return resp.to_wire()
        q = query.question[0]
        host = q.name.to_text(omit_final_dot=True).lower()
        if host in OWN_NAMES:
            if q.rdtype == dns.rdatatype.A:
                resp.answer.append(
                    dns.rrset.from_rdata(
                        q.name, TTL_S, dns.rdata.from_text(dns.rdataclass.IN, dns.rdatatype.A, "127.0.0.1")
                    )
                )
            return resp.to_wire()
        ports = self.policy.ports_for(host)
        if not ports:
            if q.rdtype == dns.rdatatype.A:  # a lookup asks A and AAAA at once: one denial per lookup
                self._deny(client, host, self.policy.decide(host, 443).rule)
            resp.set_rcode(dns.rcode.NXDOMAIN)
            return resp.to_wire()
        if q.rdtype != dns.rdatatype.A:
            return resp.to_wire()  # AAAA and the rest: no records (IPv4 through the forwards)
        try:
            addrs = await self._resolve(host)
        except OSError as e:
            log.warning(
                "egress DNS FAILED server=%s host=%s: the host's resolver failed (%s); not a policy denial",
                client,
                host,
                e,
            )
            resp.set_rcode(dns.rcode.SERVFAIL)
            return resp.to_wire()
        if not addrs:
            log.warning(
                "egress DNS FAILED server=%s host=%s: no IPv4 address on this host; not a policy denial", client, host
            )
            resp.set_rcode(dns.rcode.NXDOMAIN)
            return resp.to_wire()
        decision = self.policy.decide(host, ports[0], addrs)
        if not decision.allowed:
            self._deny(client, host, decision.rule)
            resp.set_rcode(dns.rcode.NXDOMAIN)
            return resp.to_wire()
        ip = await self._forward(client, host, ports)
        if ip is None:
            resp.set_rcode(dns.rcode.SERVFAIL)
            return resp.to_wire()
        rr = dns.rrset.from_rdata(q.name, TTL_S, dns.rdata.from_text(dns.rdataclass.IN, dns.rdatatype.A, ip))
        resp.answer.append(rr)
        return resp.to_wire()

    async def _forward(self, client: str, host: str, ports: list[int]) -> str | None:
        """The address answered for ``host`` to ``client``, its forwards listening (made once)."""
        key = (client, host)
        if key in self._names:
            return self._names[key]
        n = sum(1 for c, _ in self._names if c == client) + 1
        if n > MAX_NAMES:
            log.warning("egress DNS: %s resolved more than %d names; %s is not forwarded", client, MAX_NAMES, host)
            return None
        ip = f"127.{self.subnet}.{self._clients.get(client, 1)}.{n}"
        for port in ports:

            async def dial(port: int = port) -> socket.socket:
                addrs = await self._resolve(host)  # OSError: the host's resolver failed (not a denial)
                if not addrs:
                    raise OSError(f"{host} has no IPv4 address on this host (not a policy denial)")
                decision = self.policy.decide(host, port, addrs)
                if not decision.allowed:
                    self._deny(client, host, decision.rule, port)
                    raise OSError(f"egress to {host}:{port} denied ({decision.rule})")
                log.info("egress ALLOW server=%s host=%s port=%s via=dns", client, host, port)
                return await asyncio.wait_for(host_dial(addrs[0], port), 10)

            sock = self.listen(ip, port)
            if inspect.isawaitable(sock):
                sock = await sock
            self._servers.append(await serve_forward(sock, dial))
        self._names[key] = ip
        return ip

    def close(self) -> None:
        for s in self._servers:
            s.close()
        for t in self._transports:
            t.close()
        self._servers.clear()
        self._transports.clear()
