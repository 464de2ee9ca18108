"""One typed snapshot of the agent's health, the only shape of ``status.json`` and the source of
every heartbeat: the agent builds a ``Snapshot``; ``to_json`` writes it; ``read`` takes it back
(tolerantly: a file from another version, or damaged, gives a snapshot plus the problems found)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from ..model import Heartbeat, VmIdentity

STATUS_FILE = "status.json"  # in the state directory: written by `run`, read by `status`


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


@dataclass(frozen=True, slots=True)
class SinkHealth:
    spool_depth: int = 0
    last_delivery_at: float | None = None  # epoch seconds
    last_error: str | None = None
    delivered: int = 0
    failed: int = 0
    dead_lettered: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Times are epoch seconds; None where unknown (never polled, never delivered...)."""

    version: str | None = None
    pid: int | None = None
    started_at: float | None = None
    written_at: float | None = None
    poll_interval: float | None = None
    uptime_seconds: float | None = None
    last_poll_at: float | None = None
    last_poll_ok: bool | None = None
    last_poll_ok_at: float | None = None
    last_poll_error: str | None = None
    last_poll_latency_ms: float | None = None
    polls: int | None = None
    poll_errors: int | None = None
    last_incarnation: int | None = None
    open_events: tuple[OpenEvent, ...] = ()
    delivered: int = 0
    failed_deliveries: int = 0
    dropped: int = 0
    dead_lettered: int = 0
    spool_depth: int = 0  # the deepest sink's backlog
    sinks: Mapping[str, SinkHealth] = field(default_factory=dict)
    malformed_events: int = 0
    truncated_values: int = 0
    persist_failures: int = 0  # polls that could not be committed (disk full, read-only...)
    persist_error: str | None = None  # the last such failure while it lasts; None once one works
    disk_full: bool = False  # that failure was "no space left"
    stopped: bool = False
    # the policy's actions (se_forwarder.actions), counted since start
    hooks_running: int = 0
    hooks_succeeded: int = 0
    hooks_failed: int = 0
    approvals_sent: int = 0
    approvals_failed: int = 0
    dry_run_decisions: int = 0
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["open_events"] = [asdict(e) for e in self.open_events]
        out["sinks"] = {name: asdict(s) for name, s in self.sinks.items()}
        return out

    def heartbeat(self, reason: str, vm: VmIdentity, time_generated: str,
                  record_id: str) -> Heartbeat:
        """The heartbeat row (record-contract.md §3) for this snapshot."""
        return Heartbeat(
            TimeGenerated=time_generated, RecordId=record_id, Reason=reason, vm=vm,
            UptimeSeconds=round(self.uptime_seconds or 0.0, 3),
            Polls=self.polls or 0, PollErrors=self.poll_errors or 0,
            LastPollLatencyMs=None if self.last_poll_latency_ms is None
            else round(self.last_poll_latency_ms, 3),
            LastIncarnation=self.last_incarnation, OpenEvents=len(self.open_events),
            SpoolDepth=self.spool_depth, DeliveredRecords=self.delivered,
            FailedDeliveries=self.failed_deliveries, DroppedRecords=self.dropped,
            DeadLetteredRecords=self.dead_lettered,
            OpenEventList=[asdict(e) for e in self.open_events],
            MalformedEvents=self.malformed_events, TruncatedValues=self.truncated_values,
            PersistFailures=self.persist_failures,
            HooksRunning=self.hooks_running, HooksSucceeded=self.hooks_succeeded,
            HooksFailed=self.hooks_failed, ApprovalsSent=self.approvals_sent,
            ApprovalsFailed=self.approvals_failed, DryRunDecisions=self.dry_run_decisions,
        )


# -- reading it back ---------------------------------------------------------------------------

def parse_time(value: Any) -> float | None:
    """A status.json time as epoch seconds: ISO 8601 (``Z`` or offset; naive = UTC), epoch
    milliseconds (above 1e11) or epoch seconds. None/empty gives None; anything else ValueError."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"not a time: {value!r}")
        return value / 1000.0 if abs(value) > 1e11 else float(value)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        dt = datetime.fromisoformat(text)
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        return dt.timestamp()
    raise ValueError(f"not a time: {value!r}")


_TIMES = {"started_at", "written_at", "last_poll_at", "last_poll_ok_at"}


def read(data: Mapping[str, Any]) -> tuple[Snapshot, list[str]]:
    """A snapshot from status.json's object; unusable values become None, each named in the
    returned problems (a bad time is a problem: it hides how fresh the status is)."""
    problems: list[str] = []
    values: dict[str, Any] = {}
    for f in fields(Snapshot):
        if f.name not in data:
            continue
        raw = data[f.name]
        if f.name in _TIMES:
            try:
                values[f.name] = parse_time(raw)
            except (ValueError, TypeError):
                problems.append(f"{f.name} is not a valid time: {raw!r}")
        elif f.name == "open_events":
            values[f.name] = tuple(_open_event(e) for e in raw or () if isinstance(e, dict))
        elif f.name == "sinks":
            values[f.name] = {str(k): _sink(v) for k, v in (raw or {}).items()
                              if isinstance(v, dict)} if isinstance(raw, dict) else {}
        else:
            values[f.name] = _scalar(f.name, raw)
    return Snapshot(**values), problems


def _scalar(name: str, raw: Any) -> Any:
    kinds = {"pid": int, "polls": int, "poll_errors": int, "last_incarnation": int,
             "delivered": int, "failed_deliveries": int, "dropped": int, "dead_lettered": int,
             "spool_depth": int, "poll_interval": float, "uptime_seconds": float,
             "last_poll_latency_ms": float, "last_poll_ok": bool, "stopped": bool,
             "version": str, "last_poll_error": str, "malformed_events": int,
             "truncated_values": int, "persist_failures": int, "persist_error": str,
             "disk_full": bool, "hooks_running": int, "hooks_succeeded": int,
             "hooks_failed": int, "approvals_sent": int, "approvals_failed": int,
             "dry_run_decisions": int, "dry_run": bool}
    kind = kinds.get(name)
    if kind is None or raw is None:
        return raw
    if kind is bool:
        return raw if isinstance(raw, bool) else None
    if isinstance(raw, bool):
        return None
    if kind is int:
        return raw if isinstance(raw, int) else None
    if kind is float:
        return float(raw) if isinstance(raw, (int, float)) and math.isfinite(raw) else None
    return raw if isinstance(raw, str) else str(raw)


def _open_event(e: Mapping[str, Any]) -> OpenEvent:
    return OpenEvent(**{f.name: e.get(f.name) for f in fields(OpenEvent)})


def _sink(v: Mapping[str, Any]) -> SinkHealth:
    try:
        last = parse_time(v.get("last_delivery_at"))
    except (ValueError, TypeError):
        last = None
    def count(key: str) -> int:
        n = v.get(key)
        return n if isinstance(n, int) and not isinstance(n, bool) else 0
    return SinkHealth(count("spool_depth"), last,
                      v.get("last_error") if isinstance(v.get("last_error"), str) else None,
                      count("delivered"), count("failed"), count("dead_lettered"))
