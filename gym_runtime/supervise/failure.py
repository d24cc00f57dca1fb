"""What the supervisor says when the environment fails: the phase, the servers ready, the last log
lines of the servers concerned (docs/architecture.md §7: "log tail in the report"), the egress the
sandbox denied them, and the model-endpoint failures found at readiness (unreachable, or not
serving the policy model name).

A server that fails to start after the sandbox denied it egress (a tree that clones a repository,
downloads a model or fetches data at start-up) is reported as such (``GR-START-EGRESS``), naming
the hosts, rather than as a bare crash loop: its log tail only shows a connection error. A server
whose log shows a write refused with "Read-only file system" is told that its package and venv are
read-only in the sandbox (a tree that clones or downloads into its own install directory)."""

from __future__ import annotations

from gym_runtime.errors import StartError
from gym_runtime.supervise import readiness
from gym_runtime.supervise.member import READY, Member

READ_ONLY = "Read-only file system"  # strerror(EROFS), as Python, git and the C library print it


def failure_report(members: dict[str, Member], phase: str, tail_lines: int, message: str, code: str,
                   hint: str | None, names: list[str]) -> StartError:
    """A StartError naming ``phase`` and carrying the last ``tail_lines`` log lines of ``names``
    (else of every member not ready); ``extra`` holds ``phase``, ``servers_ready``, ``log_tails``."""
    pick = names or [n for n, m in members.items() if m.status != READY]
    tails: dict[str, list[str]] = {}
    for n in pick:
        members[n].log.drain_now()
        tails[n] = members[n].log.tail(tail_lines)
    cause = "\n".join(f"--- last {len(t)} log lines of {n} ({members[n].log.path}):\n" + "\n".join(t)
                      for n, t in tails.items() if t) or None
    ready = sum(m.status == READY for m in members.values())
    extra = {"phase": phase, "servers_ready": f"{ready}/{len(members)}", "log_tails": tails}
    denied = {n: hosts for n in pick if (hosts := denied_hosts(members[n]))}
    if denied and code in ("GR-START-CRASH", "GR-START-TIMEOUT"):
        said = "; ".join(f"{n} was denied egress to {', '.join(h)}" for n, h in denied.items())
        message = f"{message}: {said} (this tree needs the network at start-up, and egress is denied)"
        first = next(iter(denied.values()))[0].rsplit(":", 1)[0]
        code, hint = "GR-START-EGRESS", (
            "ship what the tree fetches at start-up inside the package (or bake it into the image), or have the "
            f"operator allow the host: NMP_RL_SANDBOX_ALLOW_INTERNET=true, NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW={first}")
        extra["egress_denied"] = denied
    elif code == "GR-START-CRASH" and (readonly := [n for n, t in tails.items() if any(READ_ONLY in ln for ln in t)]):
        message = (f"{message}: {', '.join(readonly)} tried to write where the sandbox is read-only (its package "
                   "and venv are read-only; $HOME, its work dir, and /tmp are writable)")
        hint = hint or ("the tree writes into its own install directory at start-up (e.g. clones or downloads next "
                        "to its code): ship that content in the package, or make the tree write under $HOME or /tmp")
    logs = [str(members[n].log.path) for n in pick]
    return StartError(f"{message} (phase: {phase}, {ready}/{len(members)} ready)", code=code, cause=cause,
                      hint=hint or "read the log lines above; fix the server or its config, then start again",
                      log=", ".join(logs) or None, extra=extra)


def denied_hosts(member: Member, limit: int = 5) -> list[str]:
    """``host:port`` the sandbox's proxy refused to ``member`` (by server name), first seen first."""
    seen: list[str] = []
    for d in getattr(member.launcher, "denials", None) or []:
        hp = f"{d.get('host')}:{d.get('port')}"
        if d.get("server") == member.name and hp not in seen:
            seen.append(hp)
    return seen[:limit]


def endpoint_failure(url: str, outcome: str | tuple, timeout_s: float) -> tuple[str, str, str]:
    """``(message, code, hint)`` for a model endpoint that failed its readiness probe: ``outcome``
    is ``"failed"`` (never answered), ``("auth", status)`` (the policy key was refused),
    ``("wrong-model", name given, names served)`` or ``("not-root", suggested /v1 root, what the
    probes saw)`` (:mod:`gym_runtime.supervise.policy_endpoint`, case C35)."""
    if isinstance(outcome, tuple) and outcome[0] == "not-root":
        _, suggestion, detail = outcome
        return (f"model endpoint {url} is not an OpenAI API root ({detail}): did you mean {suggestion}?",
                "GR-START-MODEL-URL", f"pass --policy-base-url {suggestion} (or fix the base_url in the config): "
                "the root that /chat/completions and /models hang under, /v1 for vLLM; for an endpoint that is "
                "not OpenAI-shaped at all, --model-endpoint-timeout 0 skips the endpoint checks")
    if isinstance(outcome, tuple) and outcome[0] == "auth":
        return (f"model endpoint {url} refused the policy API key: GET {readiness.model_probe_url(url)} answered "
                f"HTTP {outcome[1]}", "GR-START-MODEL-AUTH",
                "pass the endpoint's key with --policy-api-key-env VAR (or GYM_RUNTIME_POLICY_API_KEY); a keyless "
                "vLLM needs none")
    if isinstance(outcome, tuple):
        _, name, served = outcome
        return (f"model endpoint {url} does not serve the model {name!r} (policy_model_name); it serves: "
                f"{', '.join(map(repr, served)) or '(none)'}", "GR-START-MODEL-NAME",
                "pass --policy-model-name with a name the endpoint serves (vLLM: its --served-model-name), or "
                f"point --policy-base-url at the endpoint serving {name!r}")
    return (f"model endpoint {url} never answered GET {readiness.model_probe_url(url)} within {timeout_s:g}s",
            "GR-START-MODEL-ENDPOINT", "check --policy-base-url and that the model server is up; raise "
            "--model-endpoint-timeout to wait longer, or set it to 0 to skip this check")
