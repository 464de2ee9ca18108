"""The collector's health, declared once in the agent's style (health/fields.py): every field of
its ``status.json``, with the Prometheus metric that exports it. The running collector builds a
``CollectorSnapshot`` (``CollectorHealth``) every few seconds and at stop; ``se-forwarder
status`` reads it back and judges it (collector/status.py). It has no heartbeat row: the
platform table is about VMs, and the collector is not one of the agents.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from .. import __version__
from ..clock import Clock
from ..delivery import DeliveryPool
from ..health import SinkHealth
from ..health.fields import Metric, Time, by_name, counter, value
from ..health.read import COLLECTOR_ROLE
from ..outbox import Store
from .stats import AckStats, GraphStats, HubStats, ReadStats
from .writer import Writer

ROLE = COLLECTOR_ROLE  # status.json's "role": how `status` tells a collector's file from an agent's
EVENT_HUB, RESOURCE_GRAPH = "event-hub", "resource-graph"
READ_FIELDS = frozenset(f.name for f in fields(ReadStats))  # counted by both channels: summed


@dataclass(frozen=True, slots=True)
class PartitionHealth:
    """One Event Hub partition as this collector saw it (``partitions`` in status.json)."""

    owned: bool = value(bool, "This collector holds the partition now.", default=False)
    events: int = counter("Event Hub events committed from the partition.")
    last_event_at: float | None = value(Time, "Enqueued time of the last event committed.")
    last_sequence_number: int | None = value(int, "Sequence number of that event.")
    last_checkpoint_at: float | None = value(Time, "When the partition's checkpoint last moved.")
    last_batch_at: float | None = value(
        Time, "When the Event Hubs client last handed over a batch (empty ones too, each second)."
    )
    busy_since: float | None = value(Time, "A batch in hand since then (None: none).")


def _c(name: str, doc: str) -> Metric:
    return Metric(f"collector_{name}", "counter", doc)


@dataclass(frozen=True, slots=True)
class CollectorSnapshot:
    """Times are epoch seconds; None where unknown. Counts are since the collector started."""

    role: str = value(str, "Always 'collector'.", default=ROLE)
    channel: str | None = value(str, "event-hub or resource-graph.")
    version: str | None = value(str, "The collector's version.")
    pid: int | None = value(int, "The collector's process id.")
    started_at: float | None = value(Time, "When the collector started.")
    written_at: float | None = value(Time, "When this status was written.")
    uptime_seconds: float | None = value(
        float,
        "Seconds since the collector started.",
        metric=Metric("collector_uptime_seconds", "gauge", "Seconds since the collector started."),
    )
    stopped: bool = value(bool, "The collector stopped cleanly.", default=False)
    # what was read
    events: int = counter(
        "Notifications (hub) or rows (Resource Graph) read.",
        metric=_c("events", "Platform notifications or rows read."),
    )
    parse_failures: int = counter(
        "Unreadable notifications or rows, skipped (one log line each).",
        metric=_c("parse_failures", "Unreadable events skipped."),
    )
    ignored_events: int = counter(
        "Other event types (not a Scheduled Event nor an annotation).",
        metric=_c("ignored_events", "Other event types ignored."),
    )
    expanded_events: int = counter(
        "Scale-set events written as one row per VM they name.",
        metric=_c("expanded_events", "Scale-set events expanded to their VMs."),
    )
    unexpanded_events: int = counter(
        "Scale-set events naming no VM, kept on the scale set's id.",
        metric=_c("unexpanded_events", "Scale-set events naming no VM."),
    )
    names_cut: int = counter(
        "VM names past the per-event cap (1,000): no row for them (one log line per event).",
        metric=_c("names_cut", "VM names past the per-event cap."),
    )
    truncated_values: int = counter(
        "Text values cut to 32 KB (as the agent's TruncatedValues; one log line per event).",
        metric=_c("truncated_values", "Text values cut to the per-value limit."),
    )
    unknown_statuses: int = counter(
        "Rows whose EventStatus is none of the documented ones (recorded as reported).",
        metric=_c("unknown_statuses", "Rows with an undocumented EventStatus."),
    )
    set_aside: int = counter(
        "Messages or events that cannot be read or recorded: kept in "
        "unreadable-messages.jsonl and checkpointed past.",
        metric=_c("set_aside", "Unreadable messages or events kept aside."),
    )
    # what was committed
    committed: int = counter(
        "Platform rows committed to the outbox.",
        metric=_c("committed_records", "Platform rows committed."),
    )
    duplicate_notifications: int = counter(
        "Notifications dropped: the same Event Grid id again.",
        metric=_c("duplicate_notifications", "Notifications delivered twice, dropped."),
    )
    duplicate_records: int = counter(
        "Rows dropped: the same RecordId again (a replay, a Resource Graph pass).",
        metric=_c("duplicate_records", "Rows already committed, dropped."),
    )
    dropped: int = counter(
        "Rows dropped by the spool bound.",
        metric=_c("dropped_records", "Rows dropped by the spool bound."),
    )
    persist_failures: int = counter(
        "Commits to the state directory that failed.",
        metric=_c("persist_failures", "Failed commits."),
    )
    persist_error: str | None = value(str, "The failure to persist going on, if any.")
    # the Event Hub
    checkpoint_failures: int = counter(
        "Checkpoints not saved after a commit (the rows are read again, dropped as duplicates).",
        metric=_c("checkpoint_failures", "Checkpoints not saved."),
    )
    checkpoint_error: str | None = value(str, "Checkpoints failing now: the last error.")
    checkpoint_failing_since: float | None = value(Time, "Since when checkpoints fail.")
    checkpoint_store_ok_at: float | None = value(
        Time,
        "When the checkpoint store last answered (probed every 5 s).",
        metric=Metric(
            "collector_checkpoint_store_ok_timestamp_seconds",
            "gauge",
            "When the checkpoint store last answered (epoch seconds).",
            lambda v: v or 0.0,
        ),
    )
    checkpoint_store_error: str | None = value(str, "Why the last probe of the store failed.")
    receive_errors: int = counter(
        "Errors the Event Hubs client reported (it retries).",
        metric=_c("receive_errors", "Event Hubs client errors."),
    )
    last_receive_error: str | None = value(str, "The last of them.")
    last_event_at: float | None = value(
        Time,
        "Enqueued time of the newest event committed, over the partitions.",
        metric=Metric(
            "collector_last_event_timestamp_seconds",
            "gauge",
            "Enqueued time of the newest event committed (epoch seconds).",
            lambda v: v or 0.0,
        ),
    )
    partitions: Mapping[str, PartitionHealth] = value(
        dict,
        "Each partition seen.",
        default=dict,
        metric=Metric(
            "collector_partitions_owned",
            "gauge",
            "Partitions this collector holds.",
            lambda v: sum(1 for p in v.values() if p.owned),
        ),
    )
    # Resource Graph
    graph_interval: float | None = value(float, "Seconds between Resource Graph passes.")
    graph_queries: int = counter(
        "Resource Graph queries sent.", metric=_c("graph_queries", "Resource Graph queries.")
    )
    graph_throttled: int = counter(
        "Waits for Resource Graph's quota or a 429.",
        metric=_c("graph_throttled", "Resource Graph throttling waits."),
    )
    graph_passes: int = counter(
        "Completed Resource Graph passes.",
        metric=_c("graph_passes", "Completed Resource Graph passes."),
    )
    inventory_passes: int = counter(
        "Complete inventory passes (one Inventory row per VM, one InventoryPass row per "
        "subscription).",
        metric=_c("inventory_passes", "Complete Resource Graph inventory passes."),
    )
    inventory_vms: int = value(int, "VMs the last complete inventory pass listed.")
    graph_held: int = value(
        int,
        "Resource Graph statuses held back while Event Grid may still deliver them with Azure's "
        "own time (written when collector.resource_graph_settle has passed).",
    )
    last_pass_at: float | None = value(Time, "When the last pass ended.")
    last_pass_ok: bool | None = value(bool, "Whether it succeeded.")
    last_pass_error: str | None = value(str, "Why it failed.")
    # approvals from outside the VM ([collector.preview_acknowledge], preview API)
    approvals: bool = value(bool, "The collector approves by policy (preview).", default=False)
    ack_sent: int = counter(
        "Acknowledge requests sent (retries included).",
        metric=_c("ack_requests", "Acknowledge requests sent."),
    )
    ack_approved: int = counter(
        "Events approved by the collector (Azure answered 200).",
        metric=_c("ack_approved", "Events approved by the collector."),
    )
    ack_unknown_events: int = counter(
        "Acknowledgements Azure answered 404: it does not know the event (not retried).",
        metric=_c("ack_unknown_events", "Acknowledgements of unknown events (404)."),
    )
    ack_started_before: int = counter(
        "Events that started before the approval (409).",
        metric=_c("ack_started_before", "Events started before the collector's approval."),
    )
    ack_forbidden: int = counter(
        "Acknowledgements refused for a missing role (403): Scheduled Event Contributor.",
        metric=_c("ack_forbidden", "Acknowledgements refused: missing role."),
    )
    ack_failed: int = counter(
        "Approvals given up (NotBefore came first, a stop) or refused otherwise.",
        metric=_c("ack_failed", "Approvals given up or refused."),
    )
    ack_retries: int = counter("Acknowledge requests retried (429, 5xx, no answer).")
    ack_agent_events: int = counter(
        "Events a rule matched that name a VM with an agent: never approved by the collector."
    )
    ack_held: int = counter("Events that waited for their service's limit (each counted once).")
    agents_unknown: int = counter(
        "Rounds in which the agents' heartbeats could not be read (nothing approved then)."
    )
    agents_error: str | None = value(str, "Why the agents' heartbeats cannot be read now.")
    # delivery (as the agent's)
    delivered: int = counter("Rows confirmed by the sinks.")
    failed_deliveries: int = counter("Failed delivery attempts.")
    dead_lettered: int = counter("Rows sent to the dead-letter file.")
    dead_letters_dropped: int = counter(
        "Dead-letter lines removed to keep dead-letter.jsonl within "
        "spool.dead_letter_max_bytes (its previous file replaced)."
    )
    spool_depth: int = value(
        int,
        "Rows waiting for the slowest sink.",
        default=0,
        metric=Metric("collector_spool_depth", "gauge", "Rows waiting for the slowest sink."),
    )
    sinks: Mapping[str, SinkHealth] = value(dict, "Each sink's figures.", default=dict)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["partitions"] = {k: asdict(p) for k, p in self.partitions.items()}
        out["sinks"] = {k: asdict(s) for k, s in self.sinks.items()}
        return out


class CollectorHealth:
    """The running collector's snapshot, taken from its parts (counters handed over by name):
    the Event Hub channel's and the Resource Graph channel's counts (either or both), the
    writer's, the outbox and the delivery workers."""

    def __init__(
        self,
        *,
        channel: str,
        hub: HubStats | None,
        graph: GraphStats | None,
        graph_interval: float | None,
        writer: Writer,
        store: Store,
        delivery: DeliveryPool,
        clock: Clock,
        approvals: AckStats | None = None,
    ) -> None:
        self.channel, self.hub, self.graph, self.graph_interval = (
            channel,
            hub,
            graph,
            graph_interval,
        )
        self.writer, self.store, self.delivery, self.clock = writer, store, delivery, clock
        self.approvals = approvals
        self.started_at = clock.wall_seconds()
        self._started_mono = clock.monotonic()

    def _read(self) -> dict[str, Any]:
        """What the channels read (summed over both) and their own figures."""
        out: dict[str, Any] = {}
        for stats in (self.hub, self.graph):
            if stats is None:
                continue
            for k, v in by_name(CollectorSnapshot, stats).items():
                out[k] = out.get(k, 0) + v if k in READ_FIELDS else v
        return out

    def snapshot(self, *, stopped: bool = False) -> CollectorSnapshot:
        depths = self.store.depths()
        parts = (
            {}
            if self.hub is None
            else {
                k: PartitionHealth(**by_name(PartitionHealth, p))
                for k, p in sorted(dict(self.hub.by_partition).items())
            }
        )
        times = [p.last_event_at for p in parts.values() if p.last_event_at is not None]
        return CollectorSnapshot(
            **self._read(),
            **by_name(CollectorSnapshot, self.writer.counters),
            **by_name(CollectorSnapshot, self.delivery.totals()),
            **({} if self.approvals is None else by_name(CollectorSnapshot, self.approvals)),
            approvals=self.approvals is not None,
            dead_letters_dropped=self.delivery.dead_letters.dropped,
            channel=self.channel,
            version=__version__,
            pid=os.getpid(),
            started_at=self.started_at,
            written_at=self.clock.wall_seconds(),
            uptime_seconds=self.clock.monotonic() - self._started_mono,
            stopped=stopped,
            partitions=parts,
            last_event_at=max(times, default=None),
            graph_interval=self.graph_interval,
            spool_depth=max(depths.values(), default=0),
            sinks={
                name: SinkHealth(spool_depth=depths.get(name, 0), **by_name(SinkHealth, s))
                for name, s in self.delivery.stats().items()
            },
        )
