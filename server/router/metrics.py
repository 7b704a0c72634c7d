"""Prometheus metrics of one router (`agentix_router_*`), rendered in the text exposition
format at each scrape from the router's state (on the router's loop, where that state lives:
no lock, exactly its own counts).

Per replica (labels `replica`, its index, and `address`; a replica whose channel is closed
is left out, and a slot taken by a new address starts its counters again, as a restarted
process's would): `replica_healthy` (1 while it takes calls), `replica_calls_in_flight`
(calls forwarded there, not ended), `replica_running_tokens` and `replica_waiting_tokens`
(its last EngineStats, what placement sees, before the tokens sent since), and the counter
`replica_placements` (placement decisions that chose it, retries included).
Router-wide: `calls_in_flight`, `programs_active` (its process table) and the failover
counters `calls_retried` (retried on another replica before anything streamed) and
`calls_lost_mid_stream` (cut mid-stream: UNAVAILABLE to the client). Labels never carry
program or call ids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from server.metrics import CONTENT_TYPE

if TYPE_CHECKING:
    from fastapi import FastAPI

    from server.door_backend import DoorBackend
    from server.router.core import Router

REPLICA_LABELS = ["replica", "address"]
REPLICA_FAMILIES = (  # key, kind, name after agentix_router_, help
    ("healthy", GaugeMetricFamily, "replica_healthy", "1 while the replica takes new calls."),
    ("in_flight", GaugeMetricFamily, "replica_calls_in_flight",
     "Calls forwarded to the replica, not ended."),
    ("running", GaugeMetricFamily, "replica_running_tokens",
     "Running calls' tokens at the last poll."),
    ("waiting", GaugeMetricFamily, "replica_waiting_tokens",
     "Queued calls' tokens to compute at the last poll."),
    ("placed", CounterMetricFamily, "replica_placements",
     "Placement decisions that chose the replica."),
)


class _RouterSnapshot:
    """A collector over the router's state at the scrape."""

    def __init__(self, router: Router) -> None:
        self.router = router

    def collect(self) -> Iterator[Metric]:
        router = self.router
        replicas = [r for r in router.replicas if not r.closed]
        families = {key: kind(f"agentix_router_{name}", doc, labels=REPLICA_LABELS)
                    for key, kind, name, doc in REPLICA_FAMILIES}
        for replica in replicas:
            labels = [str(replica.index), replica.address]
            stats = replica.stats
            families["healthy"].add_metric(labels, int(replica.healthy))
            families["in_flight"].add_metric(labels, len(replica.attempts))
            families["running"].add_metric(labels, stats.running_tokens if stats else 0)
            families["waiting"].add_metric(labels, stats.waiting_tokens if stats else 0)
            families["placed"].add_metric(labels, replica.placed)
        yield from families.values()
        yield GaugeMetricFamily("agentix_router_calls_in_flight", "Calls routed, not ended.",
                                value=len(router.calls))
        yield GaugeMetricFamily("agentix_router_programs_active",
                                "Programs in the router's process table.",
                                value=len(router.programs.table))
        yield CounterMetricFamily("agentix_router_calls_retried",
                                  "Calls retried on another replica before any output.",
                                  value=router.retried)
        yield CounterMetricFamily("agentix_router_calls_lost_mid_stream",
                                  "Calls cut mid-stream by a lost replica.",
                                  value=router.lost_mid_stream)


def render_router_metrics(router: Router) -> bytes:
    """The router's metrics now, in the text exposition format (call on its loop)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_RouterSnapshot(router))
    return generate_latest(registry)


def add_router_metrics(app: FastAPI, router: Router) -> FastAPI:
    """Serve GET /metrics from `router` on `app` (which runs on the router's loop)."""
    from fastapi import Response

    async def metrics() -> Response:
        return Response(render_router_metrics(router), media_type=CONTENT_TYPE)

    app.get("/metrics")(metrics)
    return app


def build_router_metrics_app(router: Router, backend: DoorBackend) -> FastAPI:
    """/metrics and /health alone: the router's metrics port (`backend` says its health)."""
    from fastapi import FastAPI

    from server.openai_app import health_endpoint

    app = FastAPI(title="Agentix router metrics", docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.get("/health")(health_endpoint(backend))
    return add_router_metrics(app, router)
