"""The agent's counters and gauges in Prometheus' format, through ``prometheus-client``.

One collector reads the agent's own figures (``health.Snapshot`` and the per-phase record
counts) when scraped, so every metric exists from the start (at 0) and nothing is counted twice.
Which fields are exported, and under which names, is said by the snapshot's declaration.
Labels are bounded: ``sink`` (the configured sinks), ``phase`` (five) and ``event_type`` (the
known types, anything else ``other``): never an EventId or a VM name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .. import __version__
from ..health import SinkHealth
from ..health.fields import Metric, specs
from ..model import EVENT_TYPES, NODE_PHASES, PHASES
from ..oshost import files
from .config import MetricsConfig

LABELLED_TYPES = (*EVENT_TYPES, "other")
TEXTFILE_MODE = 0o644  # node_exporter, another user, reads it (the unit's UMask is 0077)
P = "se_forwarder_"


def event_type_label(event_type: str) -> str:
    return event_type if event_type in EVENT_TYPES else "other"


class Declared(Protocol):
    """A snapshot declared with health/fields.py (the agent's, the collector's): its fields are
    read through their declaration, the sinks' figures by name."""

    @property
    def sinks(self) -> Mapping[str, SinkHealth]: ...


class AgentCollector(Collector):
    """``snapshot``: the agent's, or any snapshot declared the same way (the collector's, which
    has no lifecycle ``records``)."""

    def __init__(
        self,
        snapshot: Callable[[], Declared],
        records: Callable[[], Mapping[tuple[str, str], int]] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.records = records

    def describe(self) -> list[Any]:
        return []  # collected only when scraped (no call at registration)

    def collect(self) -> Iterator[Any]:
        s = self.snapshot()
        yield from _agent(s)
        if self.records is not None:
            yield from _records(self.records())
        yield from _sinks(s)


def _number(v: Any) -> float:
    return 0.0 if v is None else float(v)


def _family(m: Metric, labels: list[str] | None = None) -> Any:
    kind = CounterMetricFamily if m.kind == "counter" else GaugeMetricFamily
    return kind(P + m.name, m.help, labels=labels)


def _agent(s: Declared) -> Iterator[Any]:
    """One metric per ``Metric`` of the snapshot's declaration (health/snapshot.py)."""
    info = GaugeMetricFamily(P + "info", "The agent's version.", labels=["version"])
    info.add_metric([__version__], 1)
    yield info
    for name, spec in specs(type(s)):
        for m in spec.metrics:
            v = getattr(s, name)
            fam = _family(m, [])
            fam.add_metric([], m.value(v) if m.value is not None else _number(v))
            yield fam


def _records(counts: Mapping[tuple[str, str], int]) -> Iterator[Any]:
    fam = CounterMetricFamily(
        P + "lifecycle_records", "Lifecycle records committed.", labels=["phase", "event_type"]
    )
    # every lifecycle phase from 0; a node step's (Kubernetes nodes) once it happens
    folded: dict[tuple[str, str], int] = {
        (p, t): 0 for p in PHASES if p not in NODE_PHASES for t in LABELLED_TYPES
    }
    for (phase, event_type), n in counts.items():
        key = (phase, event_type_label(event_type))
        folded[key] = folded.get(key, 0) + n
    for (phase, event_type), n in sorted(folded.items()):
        fam.add_metric([phase, event_type], n)
    yield fam


def _sinks(s: Declared) -> Iterator[Any]:
    """One metric per ``Metric`` of ``SinkHealth``'s declaration, labelled by sink."""
    for name, spec in specs(SinkHealth):
        for m in spec.metrics:
            fam = _family(m, ["sink"])
            for sink, health in sorted(s.sinks.items()):
                v = getattr(health, name)
                fam.add_metric([sink], m.value(v) if m.value is not None else _number(v))
            yield fam


class Exporter:
    """The HTTP endpoint (a daemon thread of prometheus-client's) and the textfile."""

    def __init__(
        self,
        cfg: MetricsConfig,
        snapshot: Callable[[], Declared],
        records: Callable[[], Mapping[tuple[str, str], int]] | None = None,
    ) -> None:
        self.cfg = cfg
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(AgentCollector(snapshot, records))
        self._server: Any = None

    def start(self) -> None:
        if self.cfg.listen:
            host, port = self.cfg.address
            self._server, _thread = start_http_server(port, addr=host, registry=self.registry)

    def write_textfile(self) -> None:
        """Atomically, through a temporary file only this call can have made (``files.replace``),
        in a directory only root and the agent can write (``PermissionError`` otherwise)."""
        if self.cfg.textfile is not None:
            files.private_dir(self.cfg.textfile.parent, create=True)
            files.replace(self.cfg.textfile, generate_latest(self.registry), TEXTFILE_MODE)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
