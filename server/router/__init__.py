"""The multi-engine router: agentix.v1.Agentix in front of N replicas (see README "Many
engines"). replica (one replica's channel, health and load), programs (the global program
records and their fold), prompts (prompt length and block hashes for placement), core (the
router's state and placement decisions), generate (place, forward, relay, retry), service
(every RPC), app (start/stop), spawn (`agentix serve --replicas N`: local replica
processes).

The router holds no model: it imports no engine (so no torch) and not server.app; what it
shares with the server lives in torch-free modules (scheduler.addresses, scheduler.ids,
scheduler.deadlines, server.errors, server.request_checks, server.wire,
server.http_server). Only its OpenAI door (http_backend) and metrics port, imported when
served, load the engine (and torch)."""

from server.router.app import RouterOptions, RunningRouter, start_router

__all__ = ["RouterOptions", "RunningRouter", "start_router"]
