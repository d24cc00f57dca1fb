"""The egress policy: which (host, port) a sandboxed server may reach (docs/architecture.md §6).

Operator settings only (never job fields), read from the environment:

* ``NMP_RL_SANDBOX_ALLOW_INTERNET``: ``true/false/1/0/yes/no`` (default false).
* ``NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW``: comma list of ``host``, ``*.suffix`` or a canonical IP
  literal, each with an optional ``:port`` (``[v6]:port`` for IPv6).

Decision order (first match wins), see :meth:`EgressPolicy.decide`:

1. the host is normalised (lower case, trailing dot and brackets stripped, IDNA); a host that is
   not a valid name is denied ``bad-host``;
2. a policy endpoint (host and port of a ``policy_model`` URL) is allowed ``policy-endpoint``;
3. a canonical loopback literal (``127.x.y.z``, ``::1``) or ``localhost`` is allowed ``loopback-peer``
   (the proxy connects to it inside the sandbox network, so only the environment's own servers answer);
4. any other IP literal, in any spelling (``127.1``, ``2130706433``, ``0x7f.1``, IPv6, bracketed),
   is denied ``ip-literal`` unless listed by the operator;
5. internet off: denied ``internet-off``;
6. the operator list, then ``*.com`` / ``*.org``: a match with an allowed port is allowed
   ``allow:<entry>``; a name match on another port is denied ``port-not-allowed``; no match is
   ``no-match``. ``*.x.com`` matches any depth below ``x.com`` but not ``x.com`` itself (OpenSandbox
   semantics, OpenSandbox's egress sidecar (OSEP-0001, FQDN-based egress control)). Ports: 80 and 443 unless the entry names one.
7. with ``resolved`` addresses: every address must be outside the special ranges (private,
   loopback, link-local incl. metadata, CGNAT, reserved, multicast, unspecified, documentation,
   v4-mapped ...), else ``resolved-special:<ip>``. Policy endpoints and listed IPs skip this check.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from gym_runtime.errors import SettingsError

ENV_ALLOW_INTERNET = "NMP_RL_SANDBOX_ALLOW_INTERNET"
ENV_DNS_ALLOW = "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW"
DEFAULT_SUFFIXES = ("*.com", "*.org")
DEFAULT_PORTS = frozenset({80, 443})
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}
_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")

# Deny ranges: the NMP/NeMo-RL list (NeMo RL's sandbox egress policy, `nemo_rl/environments/sandbox/egress.py`) plus loopback, because a
# *name* resolving to loopback would reach the daemon's host, not the sandbox's peers.
SPECIAL_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
        "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
        "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
        "::/128", "::1/128", "::ffff:0:0/96", "64:ff9b:1::/48", "100::/64", "2001:db8::/32", "fc00::/7",
        "fe80::/10", "ff00::/8",
    )
)  # fmt: skip


@dataclass(frozen=True)
class Decision:
    """The answer for one (host, port): ``allowed`` and the ``rule`` that decided (see module doc)."""

    allowed: bool
    rule: str


@dataclass(frozen=True)
class AllowEntry:
    """One operator-list (or default) entry: ``pattern`` is ``host``, ``*.suffix`` or an IP; ``port`` None = 80/443."""

    pattern: str
    port: int | None = None

    def matches_host(self, host: str) -> bool:
        if self.pattern.startswith("*."):
            return host.endswith(self.pattern[1:])
        return host == self.pattern

    def port_ok(self, port: int) -> bool:
        return port in DEFAULT_PORTS if self.port is None else port == self.port

    def __str__(self) -> str:
        p = self.pattern if ":" not in self.pattern else f"[{self.pattern}]"
        return p if self.port is None else f"{p}:{self.port}"


def parse_ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address when ``host`` is an IP literal in any spelling getaddrinfo would accept, else None.

    Accepts canonical v4/v6, bracketed v6, zone ids, and the legacy ``inet_aton`` forms
    (``127.1``, ``2130706433``, ``0x7f.1``, ``0177.0.0.1``).
    """
    h = host.strip().strip("[]").rstrip(".")
    try:
        return ipaddress.ip_address(h.split("%", 1)[0])
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(h))
    except (OSError, ValueError):
        return None


def normalize_host(host: str) -> str | None:
    """Lower-case, strip trailing dot/brackets, IDNA-encode; None when it is not a valid DNS name.

    IP literals (canonical only, see :func:`parse_ip_literal`) come back as their canonical text.
    """
    h = host.strip().lower()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    h = h.rstrip(".")
    if not h:
        return None
    try:
        return str(ipaddress.ip_address(h))
    except ValueError:
        pass
    try:
        h = h.encode("idna").decode("ascii")
    except UnicodeError:
        return None
    labels = h.split(".")
    if any(not _LABEL.match(label) for label in labels) or len(h) > 253:
        return None
    return h


def special_network(ip: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """The deny range containing ``ip`` (see :data:`SPECIAL_NETWORKS`), or None for a public address."""
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    for net in SPECIAL_NETWORKS:
        if addr.version == net.version and addr in net:
            return net
    return None


def _parse_entry(raw: str) -> AllowEntry:
    text = raw.strip().lower()
    port: int | None = None
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ValueError("expected ':port' after ']'")
            port = int(rest[1:])
    elif text.count(":") == 1:
        host, _, p = text.partition(":")
        port = int(p)
    else:
        host = text
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"port {port} out of range")
    wildcard = host.startswith("*.")
    ip = parse_ip_literal(host) if not wildcard else None
    if ip is not None:
        if str(ip) != host:
            raise ValueError("IP entries must be written canonically (e.g. 10.0.0.5, [fd00::1]:8443)")
        return AllowEntry(str(ip), port)
    name = normalize_host(host[2:] if wildcard else host)
    if name is None or "*" in host[2 if wildcard else 0 :]:
        raise ValueError("not a host name, '*.suffix' pattern or IP literal")
    return AllowEntry(("*." if wildcard else "") + name, port)


def suggest_allow(hosts: Iterable[str]) -> tuple[str, str]:
    """``NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW`` values that would allow ``hosts`` (``host`` or
    ``host:port``): ``(exact, patterns)``, the hosts themselves, and the same with every host of
    three or more labels as the pattern of its parent domain (``cdn-lfs.hf.co`` -> ``*.hf.co``: a
    service's redirect hosts, whose names vary, share it); ``patterns`` is empty when it would say
    nothing more. In first-seen order."""
    exact: list[str] = []
    wide: list[str] = []
    for host in hosts:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
        labels = name.strip(".").split(".")
        pattern = "*." + ".".join(labels[-2:]) if len(labels) >= 3 and parse_ip_literal(name) is None else name
        exact += [name] if name not in exact else []
        wide += [pattern] if pattern not in wide else []
    return ",".join(exact), (",".join(wide) if wide != exact else "")


def parse_bool_setting(name: str, value: str | None, default: bool = False) -> bool:
    """Parse ``true/false/1/0/yes/no`` (any case); raises SettingsError naming ``name`` and ``value``."""
    if value is None or value.strip() == "":
        return default
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise SettingsError(
        f"{name}={value!r} is not a boolean",
        hint=f"set {name} to one of true, false, 1, 0, yes, no (default: false)",
        code="GR-SETTINGS-EGRESS",
    )


def endpoint_of(url: str) -> tuple[str, int]:
    """(normalised host, port) of a policy endpoint URL (port from the URL, else 443/80 by scheme)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    host = normalize_host(parts.hostname or "")
    if host is None:
        raise SettingsError(f"policy endpoint {url!r} has no valid host", code="GR-SETTINGS-EGRESS")
    return host, parts.port or (443 if parts.scheme == "https" else 80)


@dataclass(frozen=True)
class EgressPolicy:
    """Effective egress policy of one environment. Build with :meth:`from_environ`.

    ``trusted_addresses`` is a test hook only (never read from the environment): resolved
    addresses treated as public by the range check, for loopback stand-ins of public hosts.
    """

    allow_internet: bool = False
    operator_list: tuple[AllowEntry, ...] = ()
    endpoints: tuple[tuple[str, int], ...] = ()
    trusted_addresses: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], policy_endpoints: Iterable[str] = ()) -> EgressPolicy:
        """Read the two operator variables; ``policy_endpoints`` are policy_model base URLs.

        Raises SettingsError (GR-SETTINGS-EGRESS) naming the variable, the value and the bad entry.
        """
        internet = parse_bool_setting(ENV_ALLOW_INTERNET, environ.get(ENV_ALLOW_INTERNET))
        raw = environ.get(ENV_DNS_ALLOW, "")
        entries = []
        for item in (x for x in raw.split(",") if x.strip()):
            try:
                entries.append(_parse_entry(item))
            except ValueError as e:
                raise SettingsError(
                    f"{ENV_DNS_ALLOW}={raw!r}: entry {item.strip()!r} is malformed: {e}",
                    hint="use a comma list of host names, '*.suffix' patterns or IPs, each with an optional :port",
                    code="GR-SETTINGS-EGRESS",
                ) from None
        eps = tuple(dict.fromkeys(endpoint_of(u) for u in policy_endpoints))
        return cls(internet, tuple(entries), eps)

    def with_trusted_addresses(self, addresses: Iterable[str]) -> EgressPolicy:
        """A copy whose range check treats ``addresses`` as public (tests' loopback stand-ins)."""
        return EgressPolicy(self.allow_internet, self.operator_list, self.endpoints, frozenset(addresses))

    def is_endpoint(self, host: str, port: int) -> bool:
        """True when (host, port) is a policy endpoint (host normalised here)."""
        return (normalize_host(host), port) in self.endpoints

    def decide(self, host: str, port: int, resolved: list[str] | None = None) -> Decision:
        """Decide (host, port); with ``resolved`` also check every resolved address (module doc)."""
        raw = host.strip().strip("[]").rstrip(".").lower()
        norm = normalize_host(host)
        ip = parse_ip_literal(raw)
        if norm is None and ip is None:
            return Decision(False, "bad-host")
        if ip is None and raw.rsplit(".", 1)[-1].isdigit():
            return Decision(False, "ip-literal")  # all-numeric TLD: an address in disguise
        if norm is not None and (norm, port) in self.endpoints:
            return Decision(True, "policy-endpoint")
        if ip is not None:
            canonical = str(ip) == raw
            if canonical and (ip.is_loopback and (ip.version == 6 or raw.count(".") == 3)):
                return Decision(True, "loopback-peer")
            for e in self.operator_list if self.allow_internet else ():
                if canonical and e.pattern == str(ip):
                    return (
                        Decision(True, f"allow:{e}") if e.port_ok(port) else Decision(False, f"port-not-allowed:{port}")
                    )
            return Decision(False, "ip-literal")
        assert norm is not None
        if norm == "localhost":
            return Decision(True, "loopback-peer")
        if not self.allow_internet:
            return Decision(False, "internet-off")
        entries = [*self.operator_list, *(AllowEntry(s) for s in DEFAULT_SUFFIXES)]
        hits = [e for e in entries if e.matches_host(norm)]
        if not hits:
            return Decision(False, "no-match")
        ok = next((e for e in hits if e.port_ok(port)), None)
        if ok is None:
            return Decision(False, f"port-not-allowed:{port}")
        for addr in resolved or ():
            if addr in self.trusted_addresses:
                continue
            net = special_network(addr)
            if net is not None:
                return Decision(False, f"resolved-special:{addr} ({net})")
        return Decision(True, f"allow:{ok}")

    def ports_for(self, host: str) -> list[int]:
        """The ports a *name* may be reached on (its matching entries' ports, 80/443 for an entry
        without one), each one allowed by :meth:`decide`; empty when the name is denied."""
        norm = normalize_host(host)
        if norm is None or not self.allow_internet:
            return []
        entries = [*self.operator_list, *(AllowEntry(s) for s in DEFAULT_SUFFIXES)]
        ports = sorted({p for e in entries if e.matches_host(norm) for p in ((e.port,) if e.port else DEFAULT_PORTS)})
        return [p for p in ports if self.decide(norm, p).allowed]

    def effective_allowlist(self) -> list[dict[str, str]]:
        """What a sandboxed server may reach, each entry with where it comes from:
        ``[{"allow": "127.0.0.0/8, ::1, localhost", "source": ...}, {"allow": "host:port", ...}, ...]``.
        Operator entries and the ``*.com`` / ``*.org`` defaults are listed only while
        ``NMP_RL_SANDBOX_ALLOW_INTERNET`` is on (they decide nothing otherwise)."""
        ports = "/".join(str(p) for p in sorted(DEFAULT_PORTS))
        out = [{"allow": "127.0.0.0/8, ::1, localhost", "source": "built-in: the environment's own servers"}]
        out += [{"allow": f"{h}:{p}", "source": "policy endpoint, policy_base_url"} for h, p in self.endpoints]
        if self.allow_internet:
            out += [
                {"allow": str(e) if e.port else f"{e}:{ports}", "source": ENV_DNS_ALLOW} for e in self.operator_list
            ]
            out += [
                {"allow": f"{s}:{ports}", "source": f"built-in while {ENV_ALLOW_INTERNET}=true"}
                for s in DEFAULT_SUFFIXES
            ]
        return out

    def summary(self) -> str:
        """The effective allowlist as one line for a person (``up`` prints it at start)."""
        entries = "; ".join(f"{e['allow']} ({e['source']})" for e in self.effective_allowlist())
        off = (
            ""
            if self.allow_internet
            else f"; internet off ({ENV_ALLOW_INTERNET})"
            + (
                f", so {ENV_DNS_ALLOW} ({', '.join(map(str, self.operator_list))}) is not in effect"
                if self.operator_list
                else ""
            )
        )
        return f"egress allowlist (everything else denied): {entries}{off}"

    def describe(self) -> dict:
        """JSON-ready effective policy (printed at start, served by the head server's ``/health``)."""
        return {
            "default": "deny",
            "allowlist": self.effective_allowlist(),
            "allow_internet": self.allow_internet,
            "always_allowed": ["loopback peers (127.0.0.0/8, ::1, localhost)"]
            + [f"{h}:{p} (policy endpoint)" for h, p in self.endpoints],
            "allowed_names": ([str(e) for e in self.operator_list] + list(DEFAULT_SUFFIXES))
            if self.allow_internet
            else [],
            "operator_list": [str(e) for e in self.operator_list],
            "operator_list_active": self.allow_internet,
            "default_ports": sorted(DEFAULT_PORTS),
            "denied_ranges": [str(n) for n in SPECIAL_NETWORKS],
            "notes": [
                "'*.x.com' matches names below x.com, not x.com itself",
                "IP literals are denied unless listed; names resolving into denied ranges are denied",
                f"set {ENV_ALLOW_INTERNET} / {ENV_DNS_ALLOW} to change (operator settings only)",
            ],
        }
