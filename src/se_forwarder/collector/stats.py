"""What the collector's channels count, named as its health declaration (collector/health.py)
names the fields, so the snapshot takes them by name (``health.fields.by_name``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .eventgrid import Parsed


@dataclass
class ReadStats:
    """Notifications (Event Hub) or rows (Resource Graph) read, and what became of them."""

    events: int = 0
    parse_failures: int = 0  # unreadable: one log line each, skipped
    ignored_events: int = 0  # other event types (e.g. AvailabilityStatusChanged)
    expanded_events: int = 0  # scale-set events given one row per VM they name
    unexpanded_events: int = 0  # scale-set events naming no VM: kept on the scale set's id
    names_cut: int = 0  # VM names past the per-event cap: no row for them
    truncated_values: int = 0  # text values cut to the per-value limit
    unknown_statuses: int = 0  # rows with an EventStatus outside the documented ones

    def add(self, parsed: Parsed) -> None:
        self.events += len(parsed.notifications) + len(parsed.problems) + parsed.ignored
        self.parse_failures += len(parsed.problems)
        self.ignored_events += parsed.ignored
        self.expanded_events += parsed.expanded
        self.unexpanded_events += parsed.unexpanded
        self.names_cut += parsed.names_cut
        self.truncated_values += parsed.truncated_values
        self.unknown_statuses += parsed.unknown_statuses


@dataclass
class PartitionStats:
    owned: bool = False
    events: int = 0  # Event Hub events (message bodies) committed from this partition
    last_event_at: float | None = None  # the last committed event's enqueued time, epoch s
    last_sequence_number: int | None = None
    last_checkpoint_at: float | None = None  # when its checkpoint last moved (collector's clock)
    last_batch_at: float | None = None  # when the client last handed a batch over, empty or not
    busy_since: float | None = None  # a batch in hand (parse, commit, checkpoint) since then


@dataclass
class HubStats(ReadStats):
    checkpoint_failures: int = 0  # rows committed, checkpoint not moved: they are read again
    receive_errors: int = 0  # errors the consumer client reported (it retries)
    last_receive_error: str | None = None
    set_aside: int = 0  # messages or events that cannot be read or recorded, kept aside
    checkpoint_error: str | None = None  # checkpoints failing now (None: the last one saved)
    checkpoint_failing_since: float | None = None
    checkpoint_store_ok_at: float | None = None  # the store last answered the collector's probe
    checkpoint_store_error: str | None = None  # why the last probe failed (None: it answered)
    by_partition: dict[str, PartitionStats] = field(default_factory=dict)


@dataclass
class GraphStats(ReadStats):
    graph_queries: int = 0
    graph_throttled: int = 0  # waits for the quota's reset or a 429's Retry-After
    graph_passes: int = 0  # completed passes over both tables
    inventory_passes: int = 0  # complete inventory passes (every subscription listed)
    inventory_vms: int = 0  # VMs the last complete inventory pass listed
    graph_held: int = 0  # statuses held back for Event Grid's copy (resource_graph_settle)
    last_pass_at: float | None = None  # when the last pass ended (epoch s), well or not
    last_pass_ok: bool | None = None
    last_pass_error: str | None = None


@dataclass
class AckStats:
    """The collector's approvals (collector/approver.py), named as its health declares them."""

    ack_sent: int = 0
    ack_approved: int = 0
    ack_unknown_events: int = 0
    ack_started_before: int = 0
    ack_forbidden: int = 0
    ack_failed: int = 0
    ack_retries: int = 0
    ack_agent_events: int = 0
    ack_held: int = 0
    agents_unknown: int = 0
    agents_error: str | None = None
