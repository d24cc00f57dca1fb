"""What the supervisor says when the environment fails: the phase, the servers ready, the last log
lines of the servers concerned (docs/architecture.md §7: "log tail in the report"), for a timeout
what was seen of each server not ready (process, port, HTTP, last log line, step durations), the
egress the sandbox denied them, and the model-endpoint failures found at readiness (unreachable,
or not serving the policy model name).

A server that fails to start after the sandbox denied it egress (a tree that clones a repository,
downloads a model or fetches data at start-up) is reported as such (``GR-START-EGRESS``), naming
the hosts, rather than as a bare crash loop: its log tail only shows a connection error. A name the
allowlist permits but that resolves to the host's own or a private address is said to be one, with
a hint that does not offer the allowlist again (allowing it changes nothing). A server
whose log shows a write refused with "Read-only file system" is told that its package and venv are
read-only in the sandbox (a tree that clones or downloads into its own install directory); so is one
whose log shows SQLite's words for the same refusal ("unable to open database file", "attempt to
write a readonly database": SQLite's ``SQLITE_CANTOPEN`` and ``SQLITE_READONLY`` messages, as a WAL-mode
database in a read-only tree gives them), with the fixes for such a database."""

from __future__ import annotations

import time

from gym_runtime.config.url_secrets import mask_url
from gym_runtime.errors import StartError
from gym_runtime.supervise import readiness
from gym_runtime.supervise.member import READY, Member

READ_ONLY = "Read-only file system"  # strerror(EROFS), as Python, git and the C library print it
# sqlite3_errstr(SQLITE_CANTOPEN) and (SQLITE_READONLY): what a WAL-mode database in a read-only tree gives
SQLITE_READ_ONLY = ("unable to open database file", "attempt to write a readonly database")


def port_listening(pid: int | None, port: int | None) -> bool:
    """True when a TCP socket listens on ``port`` in the network namespace of process ``pid``
    (``/proc/PID/net/tcp`` and ``tcp6``, ``proc(5)``: state ``0A`` is LISTEN): the server's own
    namespace at every isolation level, where psutil reads only the daemon's."""
    if not pid or not port:
        return False
    want = f":{port:04X}"
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f, None)
                if any(len(p := line.split()) > 3 and p[1].endswith(want) and p[3] == "0A" for line in f):
                    return True
        except OSError:
            continue
    return False


def seen(m: Member, now: float) -> str:
    """What start-up saw of one server that is not ready: process alive or not, port bound or not,
    HTTP answered or not, the last log line, and how long each step took (C06's kind: never a
    lumped "0/2 ready")."""
    if m.proc is None:
        return f"{m.name}: not started (it starts once the servers before it are ready)"
    since = now - (m.spawned_at or now)
    alive = m.proc.poll() is None
    parts = [
        f"process alive (pid {m.proc.app_pid() or m.proc.pid}) for {since:.1f}s"
        if alive
        else f"process exited ({(m.last_exit or {}).get('reason', 'exited')}, status "
        f"{(m.last_exit or {}).get('returncode')})"
    ]
    if m.probe_path and m.probe_path.startswith(("/", "tcp")):
        bound = (
            m.port_bound_s
            if m.port_bound_s is not None
            else (since if alive and port_listening(m.proc.app_pid() or m.proc.pid, m.port) else None)
        )
        if m.port is not None:  # none: a replica on a Ray node, whose port is not on this host
            parts.append(
                f"port {m.port} bound after {bound:.1f}s"
                if bound is not None
                else f"port {m.port} not bound" + (f" in {since:.1f}s" if alive else "")
            )
        if m.probe_path != "tcp":
            parts.append(
                f"GET {m.probe_path} not answered"
                + (f" ({m.probe_note})" if m.probe_note else "")
                + (f" in the {since - bound:.1f}s since" if bound is not None and alive else "")
            )
    last = m.log.last_line()
    parts.append(f"last log line: {last!r}" if last else "no log output")
    return f"{m.name}: " + "; ".join(parts)


def failure_report(
    members: dict[str, Member],
    phase: str,
    tail_lines: int,
    message: str,
    code: str,
    hint: str | None,
    names: list[str],
    after_fix: str = "then start again",
) -> StartError:
    """A StartError naming ``phase`` and carrying the last ``tail_lines`` log lines of ``names``
    (else of every member not ready) since each one's latest start; ``extra`` holds ``phase``, ``servers_ready``, ``log_tails``
    and, for a timeout, ``servers_seen``: a line per server not ready (:func:`seen`), also at the
    top of the cause. ``after_fix``: the default hint's last words (``SuperviseOptions.after_fix``)."""
    pick = names or [n for n, m in members.items() if m.status != READY]
    tails: dict[str, list[str]] = {}
    for n in pick:
        members[n].log.drain_now()
        tails[n] = members[n].log.since_start(tail_lines)
    cause = (
        "\n".join(
            f"--- last {len(t)} log lines of {n} ({members[n].log.path}):\n" + "\n".join(t)
            for n, t in tails.items()
            if t
        )
        or None
    )
    ready = sum(m.status == READY for m in members.values())
    extra = {"phase": phase, "servers_ready": f"{ready}/{len(members)}", "log_tails": tails}
    if code == "GR-START-TIMEOUT":
        now = time.monotonic()
        lines = [seen(m, now) for m in members.values() if m.status != READY]
        extra["servers_seen"] = lines
        message += f"; not ready: {', '.join(n for n, m in members.items() if m.status != READY)}"
        cause = (
            "what start-up saw of each server not ready:\n"
            + "\n".join(f"  {ln}" for ln in lines)
            + (f"\n{cause}" if cause else "")
        )
    denied = {n: hosts for n in pick if (hosts := denied_hosts(members[n]))}
    special = {n: names for n in pick if (names := special_names(members[n]))}
    if (denied or special) and code in ("GR-START-CRASH", "GR-START-TIMEOUT"):
        message, hint = egress_words(message, denied, special)
        code = "GR-START-EGRESS"
        extra["egress_denied"] = {n: [*special.get(n, []), *denied.get(n, [])] for n in {**special, **denied}}
    elif code == "GR-START-CRASH" and (readonly := [n for n, t in tails.items() if _read_only(t)]):
        sqlite = [n for n in readonly if any(w in ln for ln in tails[n] for w in SQLITE_READ_ONLY)]
        message = (
            f"{message}: {', '.join(readonly)} tried to write where the sandbox is read-only (its package "
            "and venv are read-only; $HOME, its work dir, and /tmp are writable)"
        )
        hint = (
            "the tree writes into its own install directory at start-up (e.g. clones or downloads next "
            "to its code): ship that content in the package, make the tree write under $HOME or /tmp, or have "
            f"the operator give it a writable copy-on-write view of its tree: GYM_RUNTIME_WRITABLE_TREES="
            f"{','.join(readonly)}"
        )
        if sqlite:
            hint = (
                f"{', '.join(sqlite)} opens a SQLite database in its read-only tree; a database in WAL mode needs "
                "-wal and -shm files beside it even when opened read-only: convert it once with "
                "'PRAGMA journal_mode=DELETE', open it with 'file:...?immutable=1', or have the operator give "
                f"the tree a writable copy-on-write view: GYM_RUNTIME_WRITABLE_TREES={','.join(readonly)} "
                "(`gym-runtime validate` names such databases)"
            )
    logs = [str(members[n].log.path) for n in pick]
    return StartError(
        f"{message} (phase: {phase}, {ready}/{len(members)} ready)",
        code=code,
        cause=cause,
        hint=hint
        or "read the server's last log lines (cause) and its log file (log); fix the "
        f"server or its config, {after_fix}",
        log=", ".join(logs) or None,
        extra=extra,
    )


def _refusals(member: Member) -> list[dict]:
    return [d for d in getattr(member.launcher, "denials", None) or [] if d.get("server") == member.name]


def _read_only(tail: list[str]) -> bool:
    """Whether log lines ``tail`` show a write refused by a read-only file system (module doc)."""
    return any(READ_ONLY in ln or any(w in ln for w in SQLITE_READ_ONLY) for ln in tail)


def denied_hosts(member: Member, limit: int = 5) -> list[str]:
    """What the sandbox refused ``member`` (by server name) that an allowlist entry could open,
    first seen first: ``host:port`` for a connection, ``host (DNS lookup)`` for a name looked up by
    a client that resolves names itself (a lookup has no port)."""
    seen: list[str] = []
    for d in _refusals(member):
        if str(d.get("rule", "")).startswith("resolved-special"):
            continue
        hp = f"{d.get('host')}:{d.get('port')}" if d.get("port") is not None else f"{d.get('host')} (DNS lookup)"
        if hp not in seen:
            seen.append(hp)
    return seen[:limit]


def special_names(member: Member, limit: int = 5) -> list[str]:
    """Names ``member`` asked for that the allowlist permits but that resolve on this host into a
    special range (loopback, private, link-local ...: rule ``resolved-special:<ip> (<range>)``),
    which no allowlist entry opens: ``host (resolves to <ip>, <range>)``, first seen first."""
    seen: list[str] = []
    for d in _refusals(member):
        rule = str(d.get("rule", ""))
        if rule.startswith("resolved-special:"):
            ip, _, net = rule.removeprefix("resolved-special:").partition(" ")
            said = f"{d.get('host')} (resolves to {ip}, {net.strip('()') or 'a special range'})"
            if said not in seen:
                seen.append(said)
    return seen[:limit]


def egress_words(message: str, denied: dict[str, list[str]], special: dict[str, list[str]]) -> tuple[str, str]:
    """``(message, hint)`` of ``GR-START-EGRESS``: ``denied`` (:func:`denied_hosts`) are hosts the
    operator can allow, and the hint names the allowlist; ``special`` (:func:`special_names`) are
    names that resolve to the host's own or private addresses, which no allowlist entry opens, so
    the hint says what does instead of offering the allowlist again."""
    from sandbox.launch import SANDBOX_HOSTNAME
    from sandbox.policy import ENV_DNS_ALLOW, suggest_allow

    said, hints = [], []
    if denied:
        said.append(
            "; ".join(f"{n} was denied egress to {', '.join(h)}" for n, h in denied.items())
            + " (this tree needs the network at start-up, and egress is denied)"
        )
        exact, wide = suggest_allow(h.removesuffix(" (DNS lookup)") for hosts in denied.values() for h in hosts)
        hints.append(
            "ship what the tree fetches at start-up inside the package (or bake it into the image), or have "
            f"the operator allow the host: NMP_RL_SANDBOX_ALLOW_INTERNET=true, {ENV_DNS_ALLOW}={exact}"
            + (f" (or {wide}: every host below those domains, as a service's redirect hosts need)" if wide else "")
        )
    if special:
        said.append(
            "; ".join(f"{n} looked up {', '.join(h)}" for n, h in special.items())
            + ": a name that resolves to a loopback, private or other special address is never reached from "
            "the sandbox, whatever the allowlist"
        )
        hints.append(
            "reach the environment's own servers at localhost or 127.0.0.1 (inside the sandbox a server's "
            f"own host name is {SANDBOX_HOSTNAME}, which resolves there too), and a private service by its IP "
            f"address, which the operator lists in {ENV_DNS_ALLOW} (a listed address is not range-checked); "
            "allowing the name does not help"
        )
    return f"{message}: {'; '.join(said)}", "; ".join(hints)


def endpoint_failure(url: str, outcome: str | tuple, timeout_s: float) -> tuple[str, str, str]:
    """``(message, code, hint)`` for a model endpoint that failed its readiness probe: ``outcome``
    is ``"failed"`` (never answered), ``("auth", status)`` (the policy key was refused),
    ``("wrong-model", name given, names served)`` or ``("not-root", suggested /v1 root, what the
    probes saw)`` (:mod:`gym_runtime.policy.endpoint`, case C35). A credential inside the
    URL is masked (:func:`~gym_runtime.config.url_secrets.mask_url`)."""
    url = mask_url(url)
    if isinstance(outcome, tuple) and outcome[0] == "not-root":
        _, suggestion, detail = outcome
        suggestion = mask_url(suggestion)
        return (
            f"model endpoint {url} is not an OpenAI API root ({detail}): did you mean {suggestion}?",
            "GR-START-MODEL-URL",
            f"pass --policy-base-url {suggestion} (or fix the base_url in the config): "
            "the root that /chat/completions and /models hang under, /v1 for vLLM; for an endpoint that is "
            "not OpenAI-shaped at all, --model-endpoint-timeout 0 skips the endpoint checks",
        )
    if isinstance(outcome, tuple) and outcome[0] == "auth":
        return (
            f"model endpoint {url} refused the policy API key: GET {readiness.model_probe_url(url)} answered "
            f"HTTP {outcome[1]}",
            "GR-START-MODEL-AUTH",
            "pass the endpoint's key with --policy-api-key-env VAR (or GYM_RUNTIME_POLICY_API_KEY); a keyless "
            "vLLM needs none",
        )
    if isinstance(outcome, tuple):
        _, name, served = outcome
        return (
            f"model endpoint {url} does not serve the model {name!r} (policy_model_name); it serves: "
            f"{', '.join(map(repr, served)) or '(none)'}",
            "GR-START-MODEL-NAME",
            "pass --policy-model-name with a name the endpoint serves (vLLM: its --served-model-name), or "
            f"point --policy-base-url at the endpoint serving {name!r}",
        )
    return (
        f"model endpoint {url} never answered GET {readiness.model_probe_url(url)} within {timeout_s:g}s",
        "GR-START-MODEL-ENDPOINT",
        "check --policy-base-url and that the model server is up; raise "
        "--model-endpoint-timeout to wait longer, or set it to 0 to skip this check",
    )
