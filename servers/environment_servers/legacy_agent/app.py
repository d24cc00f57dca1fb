"""``environment_servers/legacy_agent``: a relay in front of one agent (docs/architecture.md §8), with
the HTTP contract of NeMo Gym 0.7.0 ``environment_servers/legacy_agent/app.py``.

``POST /run``: the request is sent to the agent's ``POST /run`` unread (body bytes, headers other
than connection and framing headers, cookies), and the agent's answer comes back the same way
(status, body, headers, every ``Set-Cookie``). ``POST /aggregate_metrics``: relayed to the agent
the same way (the agent aggregates its own rollouts). ``GET /``. The relay reads neither side's
contract, applies no episode limit (the agent keeps its own) and sets no cookie of its own. An
agent that cannot be reached (its connection refused past ``connect_retry_seconds``, e.g. it is
being restarted) is a 502 naming it; a request that reached the agent is never sent twice.

Config keys: ``agent_server`` (a reference ``{type: responses_api_agents, name}``; ``type`` may be left
out, as NeMo Gym 0.7.0 ``nemo_gym/global_config.py`` ``environment_server_agent_refs`` reads it),
``connect_retry_seconds`` (30), and the limits Gym's ``BaseEnvironmentServerConfig`` declares
(``max_concurrent_episodes``, ``queue_timeout_seconds``, ``default_episode_timeout_seconds``,
``cleanup_timeout_seconds``), accepted and not enforced, as Gym's relay does. Any other key is
refused at start-up, as Gym's relay refuses it (its config is ``extra="forbid"``), so a config that
runs here runs under Gym's own relay.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from _kit.config import StartupError, peer_address  # noqa: E402
from _kit.peers import Peers  # noqa: E402
from _kit.retry import RetryRule  # noqa: E402
from _kit.server import ServerContext, build_app, run_server  # noqa: E402
from fastapi import Request, Response  # noqa: E402
from pydantic import BaseModel, ConfigDict, PositiveFloat, PositiveInt  # noqa: E402

AGENTS = "responses_api_agents"
# Headers that describe one hop's connection or framing, not the payload: each hop writes its own
# (httpx decodes a compressed body, so content-encoding no longer applies to what is relayed)
HOP_HEADERS = frozenset(
    {
        "connection",
        "content-encoding",
        "content-length",
        "host",
        "keep-alive",
        "transfer-encoding",
        "upgrade",
        "te",
        "trailer",
        "proxy-connection",
    }
)


class AgentRef(BaseModel):
    """The agent this relay fronts: ``{type: responses_api_agents, name}``, ``type`` optional."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["responses_api_agents"] | None = None
    name: str


class LegacyAgentConfig(BaseModel):
    """Instance config (the keys of Gym's relay, plus ``connect_retry_seconds``)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    entrypoint: str
    host: str | None = None
    port: int | None = None
    num_workers: int | None = None
    domain: str | None = None
    agent_server: AgentRef
    connect_retry_seconds: float = 30.0
    max_concurrent_episodes: PositiveInt | None = None
    queue_timeout_seconds: PositiveFloat | None = None
    default_episode_timeout_seconds: PositiveFloat | None = None
    cleanup_timeout_seconds: PositiveFloat | None = None


def relayed(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``headers`` without the hop-by-hop and framing ones (:data:`HOP_HEADERS`), repeats kept."""
    return [(k, v) for k, v in headers if k.lower() not in HOP_HEADERS]


def create_app(ctx: ServerContext):
    config = ctx.parse(LegacyAgentConfig)
    agent = config.agent_server.name
    try:
        agent_url = peer_address(ctx.global_config, agent, AGENTS)
    except StartupError as exc:
        raise StartupError(f"'{ctx.name}' fronts agent '{agent}': {exc}") from exc
    # no read deadline: an episode takes as long as the agent lets it
    peers = Peers(None, retry=RetryRule(config.connect_retry_seconds))
    app = build_app(ctx, "legacy_agent", sessions=False)

    async def relay(request: Request, path: str) -> Response:
        upstream = await peers.post(
            agent,
            agent_url + path,
            None,
            headers=dict(relayed(request.headers.items())),
            check=False,
            content=await request.body(),
        )
        body = upstream.content
        reply = Response(content=body, status_code=upstream.status_code)
        reply.raw_headers = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in relayed(upstream.headers.multi_items())
        ]
        reply.raw_headers.append((b"content-length", str(len(body)).encode("latin-1")))
        return reply

    @app.post("/run")
    async def run(request: Request) -> Response:
        return await relay(request, "/run")

    @app.post("/aggregate_metrics")
    async def aggregate_metrics(request: Request) -> Response:
        return await relay(request, "/aggregate_metrics")

    return app


if __name__ == "__main__":
    run_server("environment_servers", create_app)
