"""Prometheus metrics of one server (`agentix_*`), rendered in the text exposition format.

Gauges and counters are built at each scrape from one EngineStats snapshot, so they are
exactly the engine's own counts. Histograms are observed on the engine thread: a call's
when its completion is popped, a program's when it ends. Labels never carry program or
call ids (unbounded); `tenant_label=True` adds a `tenant` label to the program histograms,
which is bounded only with auth on (the tenants of the token file).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from engine import CompletionOutput, EngineStats

if TYPE_CHECKING:
    from scheduler.process_table import ProgramRecord

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 60.0,
                   120.0, 300.0)
PER_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5,
                     0.75, 1.0, 2.5, 5.0)


class _Snapshot:
    """A collector over one EngineStats: the gauges and counters of one scrape."""

    def __init__(self, stats: EngineStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        s, load, counters = self.stats, self.stats.load, self.stats.counters
        for name, value, doc in (
                ("calls_running", load.calls_running, "Calls in the running batch."),
                ("calls_waiting", load.calls_waiting, "Queued calls (KV not swapped out)."),
                ("calls_swapped", load.calls_swapped, "Queued calls with KV on the host."),
                ("programs_active", load.programs_active, "Programs in the process table."),
                ("kv_blocks_free", s.kv_blocks_free, "Free device KV blocks holding nothing."),
                ("kv_blocks_cached", s.kv_blocks_cached,
                 "Free device KV blocks still holding a reusable prefix."),
                ("kv_blocks_used", s.kv_blocks_used, "Device KV blocks owned by calls."),
                ("host_blocks_used", s.host_blocks_used, "Host KV blocks in use.")):
            yield GaugeMetricFamily(f"agentix_{name}", doc, value=value)
        depth = GaugeMetricFamily("agentix_queue_depth", "Queued calls per priority level.",
                                  labels=["level"])
        for level, n in enumerate(load.queue_depths):
            depth.add_metric([str(level)], n)
        yield depth
        preemptions = CounterMetricFamily("agentix_preemptions", "Preemptions by mode.",
                                          labels=["mode"])
        for mode, n in s.preemptions.items():
            preemptions.add_metric([mode], n)
        yield preemptions
        swap = CounterMetricFamily("agentix_swap_bytes", "KV bytes copied between tiers.",
                                   labels=["direction"])
        swap.add_metric(["out"], counters.swap_out_bytes)
        swap.add_metric(["in"], counters.swap_in_bytes)
        yield swap
        prompt = CounterMetricFamily("agentix_prompt_tokens", "Prompt tokens of finished calls.",
                                     labels=["source"])
        prompt.add_metric(["computed"], counters.prompt_tokens_computed)
        prompt.add_metric(["cached"], counters.prompt_tokens_cached)
        yield prompt
        yield CounterMetricFamily("agentix_generation_tokens", "Tokens sampled.",
                                  value=counters.generation_tokens)
        yield CounterMetricFamily("agentix_promotions", "Anti-starvation promotions.",
                                  value=s.promotions)
        yield CounterMetricFamily("agentix_engine_steps", "Engine steps.", value=s.steps)


class ServerMetrics:
    """The histograms of one server, in a registry of its own (never the global one)."""

    def __init__(self, tenant_label: bool = False) -> None:
        self.tenant_label = tenant_label
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["tenant"] if tenant_label else []

        def histogram(name: str, doc: str, buckets: tuple[float, ...],
                      labelnames: list[str] = ()) -> Histogram:
            return Histogram(f"agentix_{name}", doc, labelnames=labelnames, buckets=buckets,
                             registry=self.registry)

        self.ttft = histogram("time_to_first_token_seconds",
                              "Arrival to first token, per call.", LATENCY_BUCKETS)
        self.tpot = histogram("time_per_output_token_seconds",
                              "Mean time between output tokens after the first, per call.",
                              PER_TOKEN_BUCKETS)
        self.queue = histogram("call_queue_seconds", "Time a call waited (queued or swapped).",
                               LATENCY_BUCKETS)
        self.service = histogram("call_service_seconds", "Service charged to a call.",
                                 LATENCY_BUCKETS)
        self.external = histogram("program_external_seconds",
                                  "A program's time outside the engine (tool calls), at its end.",
                                  LATENCY_BUCKETS, labels)
        self.normalized = histogram(
            "program_normalized_latency_seconds_per_token",
            "A program's end-to-end time over its generated tokens, at its end.",
            PER_TOKEN_BUCKETS, labels)

    def observe_call(self, completion: CompletionOutput) -> None:
        """Per-call histograms (call on the engine thread when the completion is popped)."""
        self.queue.observe(completion.queue_seconds)
        self.service.observe(completion.service_seconds)
        first = completion.first_token_time
        if first is None:
            return
        self.ttft.observe(max(0.0, first - completion.arrival_time))
        if len(completion.token_ids) > 1:
            self.tpot.observe(max(0.0, completion.finish_time - first)
                              / (len(completion.token_ids) - 1))

    def observe_program(self, record: ProgramRecord, now: float) -> None:
        """Per-program histograms, as the program ends (a program that generated nothing has
        no normalized latency)."""
        labels = {"tenant": record.tenant or ""} if self.tenant_label else {}
        external = self.external.labels(**labels) if labels else self.external
        external.observe(record.external_time)
        if record.generated_tokens:
            normalized = self.normalized.labels(**labels) if labels else self.normalized
            normalized.observe(max(0.0, now - record.started) / record.generated_tokens)

    def render(self, stats: EngineStats) -> bytes:
        """The exposition text: this snapshot's gauges and counters, then the histograms."""
        return generate_latest(_Snapshot(stats)) + generate_latest(self.registry)
