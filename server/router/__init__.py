"""The multi-engine router: agentix.v1.Agentix in front of N replicas (see README "Many
engines"). replica (one replica's channel, health and load), programs (the global program
records and their fold), prompts (prompt length and block hashes for placement), core (the
router's state and placement decisions), generate (place, forward, relay, retry), service
(every RPC), app (start/stop), spawn (`agentix serve --replicas N`: local replica
processes)."""

from server.router.app import RouterOptions, RunningRouter, start_router

__all__ = ["RouterOptions", "RunningRouter", "start_router"]
