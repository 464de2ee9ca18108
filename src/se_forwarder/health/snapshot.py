"""The agent's health, declared once: every field of ``status.json``, with the heartbeat column
and the Prometheus metric that carry it (health/fields.py). The agent builds a ``Snapshot``
(health/assemble.py); ``to_json`` is status.json, ``heartbeat`` the heartbeat row, the metrics
collector and ``status``'s warnings read the same declaration, and ``read`` takes status.json
back (health/read.py)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from operator import attrgetter
from typing import Any

from ..model import Heartbeat, VmIdentity
from .fields import SPEC, HeartbeatColumn, Metric, Time, counter, specs, value

STATUS_FILE = "status.json"  # in the state directory: written by `run`, read by `status`
# status.json and the heartbeat's OpenEventList list at most this many open events (in document
# order), in at most this many bytes of JSON; OpenEvents and the metrics count all of them.
LISTED_EVENTS = 20
LISTED_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class OpenEvent:
    """An event open at the snapshot (record-contract.md §3, ``OpenEventList``)."""

    EventId: str
    EventType: str
    EventStatus: str
    EventSource: str | None = None
    NotBefore: str | None = None
    DurationInSeconds: int | None = None
    AffectsThisVm: bool | None = None


def _round3(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def listed(events: Sequence[OpenEvent]) -> list[dict[str, Any]]:
    """The open events status.json and the heartbeat list: the first ``LISTED_EVENTS`` in
    document order, within ``LISTED_BYTES`` (a hostile document of thousands of events made
    status.json 2 MB, and a heartbeat over Log Analytics' 64 KB per value)."""
    out: list[dict[str, Any]] = []
    size = 2
    for e in events[:LISTED_EVENTS]:
        item = asdict(e)
        size += len(json.dumps(item, separators=(",", ":"))) + 1
        if size > LISTED_BYTES:
            break
        out.append(item)
    return out


@dataclass(frozen=True, slots=True)
class SinkHealth:
    """One sink's figures (``sinks`` in status.json; metrics labelled ``sink``)."""

    spool_depth: int = value(
        int,
        "Records waiting for a sink.",
        default=0,
        metric=Metric("spool_depth", "gauge", "Records waiting for a sink."),
    )
    last_delivery_at: float | None = value(
        Time,
        "When a sink last confirmed a batch.",
        metric=Metric(
            "last_delivery_timestamp_seconds", "gauge", "When a sink last confirmed a batch."
        ),
    )
    last_error: str | None = value(str, "The sink's last failure; None once one works.")
    delivered: int = counter("Records a sink confirmed.", metric="delivered_records")
    failed: int = counter("Failed delivery attempts.", metric="delivery_failures")
    dead_lettered: int = counter("Records a sink can never take.", metric="dead_lettered_records")


_ACTIONS = "the policy's actions (se_forwarder.actions), counted since start: "


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Times are epoch seconds; None where unknown (never polled, never delivered...)."""

    version: str | None = value(str, "The agent's version.")
    pid: int | None = value(int, "The agent's process id.")
    started_at: float | None = value(Time, "When the agent started.")
    written_at: float | None = value(Time, "When this status was written.")
    poll_interval: float | None = value(float, "Seconds between polls.")
    uptime_seconds: float | None = value(
        float,
        "Seconds since the agent started.",
        column=HeartbeatColumn("UptimeSeconds", lambda v: round(v or 0.0, 3)),
        metric=Metric("uptime_seconds", "gauge", "Seconds since the agent started."),
    )
    last_poll_at: float | None = value(
        Time,
        "When the last poll was made.",
        metric=Metric(
            "last_poll_timestamp_seconds", "gauge", "When the last poll was made (epoch seconds)."
        ),
    )
    last_poll_ok: bool | None = value(
        bool,
        "Whether the last poll succeeded.",
        metric=Metric("last_poll_success", "gauge", "1 when the last poll succeeded."),
    )
    last_poll_ok_at: float | None = value(Time, "When the last poll succeeded.")
    last_poll_error: str | None = value(str, "Why the last poll failed (while it does).")
    last_poll_latency_ms: float | None = value(
        float,
        "How long the last poll took, milliseconds.",
        column=HeartbeatColumn("LastPollLatencyMs", _round3),
        metric=Metric(
            "last_poll_latency_seconds",
            "gauge",
            "How long the last poll took.",
            lambda v: (v or 0.0) / 1000,
        ),
    )
    polls: int | None = counter(
        "Polls of Scheduled Events.",
        default=None,
        column=HeartbeatColumn("Polls", lambda v: v or 0),
        metric="polls",
    )
    poll_errors: int | None = counter(
        "Failed polls (no answer, not a usable document, not persisted).",
        default=None,
        column=HeartbeatColumn("PollErrors", lambda v: v or 0),
        metric="poll_errors",
    )
    last_incarnation: int | None = value(
        int, "The last DocumentIncarnation seen.", column=HeartbeatColumn("LastIncarnation")
    )
    clock_skew_seconds: float | None = value(
        float,
        "Azure's clock (IMDS answers' Date header) minus the VM's, in seconds (positive: the "
        "VM's clock is behind); NoticeSeconds and StartDelaySeconds are measured on Azure's "
        "clock when it is 2 s or more. None before an answer with a Date.",
        column=HeartbeatColumn("ClockSkewSeconds"),
        metric=Metric(
            "clock_skew_seconds",
            "gauge",
            "Azure's clock minus the VM's, from IMDS answers' Date header.",
            lambda v: v or 0.0,
        ),
    )
    open_events: tuple[OpenEvent, ...] = value(
        tuple,
        "The events open now.",
        default=tuple,
        column=(HeartbeatColumn("OpenEvents", len), HeartbeatColumn("OpenEventList", listed)),
        metric=(
            Metric("open_events", "gauge", "Events open in the last document.", len),
            Metric(
                "open_events_affecting_this_vm",
                "gauge",
                "Open events that name this VM.",
                lambda v: sum(1 for e in v if e.AffectsThisVm),
            ),
        ),
    )
    open_events_not_listed: int = value(
        int,
        f"Open events status.json leaves out of its list (it lists at most {LISTED_EVENTS}).",
        default=0,
    )
    delivered: int = counter("Records confirmed by the sinks.", column="DeliveredRecords")
    failed_deliveries: int = counter("Failed delivery attempts.", column="FailedDeliveries")
    dropped: int = counter(
        "Records dropped by the spool bound.",
        column="DroppedRecords",
        metric="dropped_records",
        warn="dropped",
    )
    dropped_heartbeats: int = counter(
        "Heartbeat rows dropped by the spool bound (DroppedRecords counts records only).",
        metric="dropped_heartbeats",
        warn="heartbeat row(s) dropped",
    )
    dead_lettered: int = counter(
        "Records sent to the dead-letter file.", column="DeadLetteredRecords", warn="dead-lettered"
    )
    dead_letters_dropped: int = counter(
        "Dead-letter lines removed to keep dead-letter.jsonl within spool.dead_letter_max_bytes "
        "(its previous file replaced).",
        column="DeadLettersDropped",
        metric="dead_letters_dropped",
        warn="dropped from the dead-letter file (at its bound)",
    )
    lost: int = counter(
        "Records lost in a damaged state database: neither read nor rebuilt.",
        column="LostRecords",
        metric="lost_records",
        warn="lost in a damaged state database",
    )
    spool_depth: int = value(
        int,
        "Records waiting for the slowest sink.",
        default=0,
        column=HeartbeatColumn("SpoolDepth"),
    )
    sinks: Mapping[str, SinkHealth] = value(dict, "Each sink's figures.", default=dict)
    malformed_events: int = counter(
        "Events served malformed or repeated, past a document's limits, or "
        "making no record (reappeared after removal, changed under an "
        "incarnation already seen).",
        column="MalformedEvents",
        metric="malformed_events",
    )
    truncated_values: int = counter(
        "Values cut to the per-value limit (each value once, however "
        "many documents serve it again; tag values cut or left out "
        "included).",
        column="TruncatedValues",
        metric="truncated_values",
    )
    held_records: int = counter(
        "Records delayed until the instance document answered (at most "
        "15 s; then sent saying the identity is unknown).",
        metric="held_records",
    )
    persist_failures: int = counter(
        "Commits to the state directory that failed.",
        column="PersistFailures",
        metric="persist_failures",
    )
    persist_error: str | None = value(str, "The failure to persist going on, if any.")
    disk_full: bool = value(
        bool,
        "That failure is 'no space left'.",
        default=False,
        metric=Metric("disk_full", "gauge", "1 while the state directory's disk is full."),
    )
    read_only: bool = value(
        bool,
        "The state directory's file system is read-only (what failed, or what `status` finds).",
        default=False,
        metric=Metric(
            "read_only", "gauge", "1 while the state directory's file system is read-only."
        ),
    )
    stopped: bool = value(bool, "The agent stopped cleanly.", default=False)
    runtime_copy: str | None = value(
        str,
        "Where the agent also writes this file, on a file system that stays writable "
        "(its runtime directory); `status` reads the fresher.",
    )
    hooks_running: int = value(
        int,
        _ACTIONS + "hooks running now.",
        default=0,
        column=HeartbeatColumn("HooksRunning"),
        metric=Metric("hooks_running", "gauge", "Policy hooks running."),
    )
    hooks_succeeded: int = counter(
        "Policy hooks that exited 0.", column="HooksSucceeded", metric="hooks_succeeded"
    )
    hooks_failed: int = counter(
        "Policy hooks that failed, timed out or were interrupted.",
        column="HooksFailed",
        metric="hooks_failed",
    )
    approvals_sent: int = counter(
        "Approvals answered 200.", column="ApprovalsSent", metric="approvals_sent"
    )
    approvals_failed: int = counter(
        "Approvals given up.", column="ApprovalsFailed", metric="approvals_failed"
    )
    dry_run_decisions: int = counter(
        "Decisions logged, not carried out (dry run).",
        column="DryRunDecisions",
        metric="dry_run_decisions",
    )
    dry_run: bool = value(bool, "The policy is in dry run.", default=False)
    acted_events: tuple[str, ...] = value(
        list,
        "What the policy did for each recent event it acted on, one line each (its rule, "
        "hooks, approval); the latest 20.",
        default=tuple,
    )
    hook_secrets_refused: int = counter(
        "Hook runs not started because their secret environment was refused (env_file: a link, "
        "a mode for the group or others, another owner; env_credentials: a credential missing); "
        "each also counts in hooks_failed.",
        metric="hook_secrets_refused",
    )

    def to_json(self) -> dict[str, Any]:
        """status.json's object (built field by field: no deep copy of the whole snapshot)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["open_events"] = listed(self.open_events)
        out["open_events_not_listed"] = (
            self.open_events_not_listed + len(self.open_events) - len(out["open_events"])
        )
        out["sinks"] = {name: asdict(s) for name, s in self.sinks.items()}
        out["acted_events"] = list(self.acted_events)
        return out

    def heartbeat(
        self, reason: str, vm: VmIdentity, time_generated: str, record_id: str
    ) -> Heartbeat:
        """The heartbeat row (record-contract.md §3) for this snapshot."""
        return Heartbeat(
            TimeGenerated=time_generated,
            RecordId=record_id,
            Reason=reason,
            vm=vm,
            values=heartbeat_values(self),
        )


def heartbeat_values(snap: Snapshot) -> dict[str, Any]:
    """Every heartbeat column the declaration carries, by column name."""
    kind: type = type(snap)  # a plain ``type``: hashable, as the cache needs
    read, columns = _columns(kind)
    return {
        col.name: col.value(v) if col.value is not None else v
        for col, v in zip(columns, read(snap), strict=True)
    }


@functools.cache
def _columns(cls: type) -> tuple[Callable[[Any], tuple[Any, ...]], tuple[HeartbeatColumn, ...]]:
    """What reads the fields of every heartbeat column in one call, and the columns, in
    declaration order (worked out once per class)."""
    pairs = [(name, col) for name, spec in specs(cls) for col in spec.columns]
    return attrgetter(*(name for name, _ in pairs)), tuple(col for _, col in pairs)


def warnings(snap: Snapshot) -> list[str]:
    """``status``'s warnings for counters declared with ``warn``."""
    kind: type = type(snap)
    return [
        f"{n} record(s) {spec.warn}"
        for name, spec in specs(kind)
        if spec.warn and (n := getattr(snap, name)) and n > 0
    ]


__all__ = [
    "SPEC",
    "STATUS_FILE",
    "OpenEvent",
    "SinkHealth",
    "Snapshot",
    "heartbeat_values",
    "warnings",
]
