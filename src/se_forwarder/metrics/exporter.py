"""The agent's counters and gauges in Prometheus' format, through ``prometheus-client``.

One collector reads the agent's own figures (``health.Snapshot`` and the per-phase record
counts) when scraped, so every metric exists from the start (at 0) and nothing is counted twice.
Labels are bounded: ``sink`` (the configured sinks), ``phase`` (five) and ``event_type`` (the
known types, anything else ``other``): never an EventId or a VM name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .. import __version__
from ..health import Snapshot
from ..model import EVENT_TYPES, PHASES
from .config import MetricsConfig

LABELLED_TYPES = (*EVENT_TYPES, "other")
P = "se_forwarder_"


def event_type_label(event_type: str) -> str:
    return event_type if event_type in EVENT_TYPES else "other"


class AgentCollector(Collector):
    def __init__(self, snapshot: Callable[[], Snapshot],
                 records: Callable[[], Mapping[tuple[str, str], int]]) -> None:
        self.snapshot = snapshot
        self.records = records

    def describe(self) -> list[Any]:
        return []  # collected only when scraped (no call at registration)

    def collect(self) -> Iterator[Any]:
        s = self.snapshot()
        yield from _agent(s)
        yield from _records(self.records())
        yield from _sinks(s)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(P + name, doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(P + name, doc, value=value)


def _agent(s: Snapshot) -> Iterator[Any]:
    info = GaugeMetricFamily(P + "info", "The agent's version.", labels=["version"])
    info.add_metric([__version__], 1)
    yield info
    yield _counter("polls", "Polls of Scheduled Events.", s.polls or 0)
    yield _counter("poll_errors", "Failed polls (no answer, not a usable document, not "
                   "persisted).", s.poll_errors or 0)
    yield _counter("malformed_events", "Events served malformed or repeated.", s.malformed_events)
    yield _counter("truncated_values", "Values cut to the per-value limit.", s.truncated_values)
    yield _counter("persist_failures", "Commits to the state directory that failed.",
                   s.persist_failures)
    yield _counter("dropped_records", "Records dropped by the spool bound.", s.dropped)
    yield _gauge("last_poll_success", "1 when the last poll succeeded.",
                 1.0 if s.last_poll_ok else 0.0)
    yield _gauge("last_poll_timestamp_seconds", "When the last poll was made (epoch seconds).",
                 s.last_poll_at or 0.0)
    yield _gauge("last_poll_latency_seconds", "How long the last poll took.",
                 (s.last_poll_latency_ms or 0.0) / 1000)
    yield _gauge("open_events", "Events open in the last document.", len(s.open_events))
    yield _gauge("open_events_affecting_this_vm", "Open events that name this VM.",
                 sum(1 for e in s.open_events if e.AffectsThisVm))
    yield _gauge("uptime_seconds", "Seconds since the agent started.", s.uptime_seconds or 0.0)
    yield _gauge("disk_full", "1 while the state directory's disk is full.",
                 1.0 if s.disk_full else 0.0)


def _records(counts: Mapping[tuple[str, str], int]) -> Iterator[Any]:
    fam = CounterMetricFamily(P + "lifecycle_records", "Lifecycle records committed.",
                              labels=["phase", "event_type"])
    folded: dict[tuple[str, str], int] = {(p, t): 0 for p in PHASES for t in LABELLED_TYPES}
    for (phase, event_type), n in counts.items():
        key = (phase, event_type_label(event_type))
        folded[key] = folded.get(key, 0) + n
    for (phase, event_type), n in sorted(folded.items()):
        fam.add_metric([phase, event_type], n)
    yield fam


def _sinks(s: Snapshot) -> Iterator[Any]:
    specs = (("delivered_records", "Records a sink confirmed.", "delivered", CounterMetricFamily),
             ("delivery_failures", "Failed delivery attempts.", "failed", CounterMetricFamily),
             ("dead_lettered_records", "Records a sink can never take.", "dead_lettered",
              CounterMetricFamily),
             ("spool_depth", "Records waiting for a sink.", "spool_depth", GaugeMetricFamily),
             ("last_delivery_timestamp_seconds", "When a sink last confirmed a batch.",
              "last_delivery_at", GaugeMetricFamily))
    for name, doc, attr, kind in specs:
        fam = kind(P + name, doc, labels=["sink"])
        for sink, health in sorted(s.sinks.items()):
            fam.add_metric([sink], getattr(health, attr) or 0)
        yield fam


class Exporter:
    """The HTTP endpoint (a daemon thread of prometheus-client's) and the textfile."""

    def __init__(self, cfg: MetricsConfig, snapshot: Callable[[], Snapshot],
                 records: Callable[[], Mapping[tuple[str, str], int]]) -> None:
        self.cfg = cfg
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(AgentCollector(snapshot, records))
        self._server: Any = None

    def start(self) -> None:
        if self.cfg.listen:
            host, port = self.cfg.address
            self._server, _thread = start_http_server(port, addr=host, registry=self.registry)

    def write_textfile(self) -> None:
        """Atomically (prometheus-client writes a temporary file and renames it)."""
        if self.cfg.textfile is not None:
            self.cfg.textfile.parent.mkdir(parents=True, exist_ok=True)
            write_to_textfile(str(self.cfg.textfile), self.registry)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
