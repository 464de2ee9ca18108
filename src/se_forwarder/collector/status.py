"""``se-forwarder status`` on a collector's state directory: its status.json read back, judged
and shown. Light: no Azure SDK is imported.

Unhealthy: no status file, stopped, dead, status not refreshed, commits failing, no partition
held with the hub failing for longer than the start-up grace, a partition stalled or the
checkpoint store unreachable or frozen, or checkpoints failing, for ``STALL_AFTER`` seconds,
Resource Graph passes stalled. Warnings (unhealthy with ``--strict``): dropped or dead-lettered
rows, unreadable events (and messages kept aside), names past the per-event cap, values cut,
undocumented statuses, scale-set events naming no VM, checkpoints not saved, the last receive
error, a failed Resource Graph pass, a sink's error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import logs
from ..clock import SYSTEM, Clock
from ..health import Assessment, HealthState, Limits, read
from ..health.read import figures
from .health import EVENT_HUB, CollectorSnapshot, PartitionHealth

STALLED_PASSES = 3  # a Resource Graph pass older than this many intervals: stalled
# A partition whose batch has been in hand this long, or that the client has handed nothing for
# this long (it calls every 0.05 s or so, empty batches too), is stalled; so is a checkpoint store
# that has not answered the collector's probe (every 5 s) or checkpoints failing this long.
# status.json is written every 5 s: `status` says so within STALL_AFTER + 5 s of the stall.
STALL_AFTER = 20.0
DEFAULT_LIMITS = Limits()


def read_snapshot(data: Mapping[str, Any]) -> tuple[CollectorSnapshot, list[str]]:
    """Tolerant, as the agent's: unusable values become None (a bad time is a problem)."""
    snap, problems = read({k: v for k, v in data.items() if k != "partitions"}, CollectorSnapshot)
    raw = data.get("partitions")
    parts = (
        {str(k): figures(PartitionHealth, v) for k, v in raw.items() if isinstance(v, dict)}
        if isinstance(raw, dict)
        else {}
    )
    return replace(snap, partitions=parts), problems


def evaluate(
    snap: CollectorSnapshot | None,
    *,
    now: float,
    limits: Limits = DEFAULT_LIMITS,
    read_problems: list[str] | None = None,
    process_alive: Callable[[int], bool | None] | None = None,
) -> Assessment:
    if snap is None:
        return Assessment(
            HealthState.MISSING,
            [("no status.json: the collector has never run with this state directory")],
        )
    v = Assessment(HealthState.HEALTHY, list(read_problems or []))
    for key in ("written_at", "started_at", "last_event_at", "last_pass_at"):
        t = getattr(snap, key)
        v.ages[key] = None if t is None else round(now - t, 3)
    if snap.stopped:
        v.state = HealthState.STOPPED
        v.problems.append("the collector stopped (clean stop recorded in status.json)")
    elif snap.pid is not None and process_alive is not None and process_alive(snap.pid) is False:
        v.state = HealthState.DEAD
        v.problems.append(f"the collector (pid {snap.pid}) is not running and did not stop cleanly")
    else:
        _running(snap, v, limits)
        v.problems += [text for _, text in stalls(snap, now)]
    v.warnings += warnings(snap)
    if v.state is HealthState.HEALTHY and (v.problems or (limits.strict and v.warnings)):
        v.state = HealthState.UNHEALTHY
    return v


def _running(snap: CollectorSnapshot, v: Assessment, limits: Limits) -> None:
    written, started = v.ages["written_at"], v.ages["started_at"]
    if written is None or written > limits.stale_after:
        v.problems.append(
            "status.json has no written_at"
            if written is None
            else f"status.json not refreshed for {written:.0f}s (limit "
            f"{limits.stale_after:.0f}s): the collector is hung or not running"
        )
    if snap.persist_error:
        v.state = HealthState.CANNOT_PERSIST
        v.problems.append(
            f"cannot commit platform rows ({snap.persist_failures} failed "
            f"commits): {snap.persist_error}"
        )
    young = started is not None and started <= limits.startup_grace
    owned = sum(1 for p in snap.partitions.values() if p.owned)
    if snap.channel == EVENT_HUB and not owned:
        why = f"; last error: {snap.last_receive_error}" if snap.last_receive_error else ""
        if young and v.state is HealthState.HEALTHY:
            v.state = HealthState.STARTING
            v.problems.append(f"no partition claimed yet; started {started:.0f}s ago{why}")
        elif snap.last_receive_error:
            v.problems.append(f"holds no partition of the hub{why}")
        else:  # more collectors than partitions: the others hold them
            v.warnings.append("holds no partition of the hub (other collectors hold them all)")
    if snap.graph_interval:
        _passes(snap, v, limits, young)


def stalls(snap: CollectorSnapshot, now: float) -> list[tuple[str, str]]:
    """(what, problem) for each partition stalled and for the checkpoint store, by the times
    in ``snap`` (the running collector logs them from the same rule)."""
    if snap.channel != EVENT_HUB:
        return []
    out = []
    for pid, p in sorted(snap.partitions.items()):
        if not p.owned:
            continue
        if p.busy_since is not None and now - p.busy_since > STALL_AFTER:
            out.append(
                (
                    f"partition {pid}",
                    f"partition {pid} stalled: one batch in hand for {now - p.busy_since:.0f}s "
                    f"(limit {STALL_AFTER:.0f}s; commit or checkpoint not returning)",
                )
            )
        elif p.last_batch_at is not None and now - p.last_batch_at > STALL_AFTER:
            out.append(
                (
                    f"partition {pid}",
                    f"partition {pid} stalled: nothing from the client for "
                    f"{now - p.last_batch_at:.0f}s (limit {STALL_AFTER:.0f}s)",
                )
            )
    since = snap.checkpoint_store_ok_at or snap.started_at
    if since is not None and now - since > STALL_AFTER:
        why = snap.checkpoint_store_error or "no answer (frozen or unreachable)"
        out.append(
            (
                "checkpoint store",
                f"checkpoint store not answering for {now - since:.0f}s (limit "
                f"{STALL_AFTER:.0f}s): {why}",
            )
        )
    failing = snap.checkpoint_failing_since
    if failing is not None and now - failing > STALL_AFTER:
        out.append(
            (
                "checkpoints",
                f"checkpoints failing for {now - failing:.0f}s: {snap.checkpoint_error}",
            )
        )
    return out


class StallWatch:
    """Logs each stall when it starts and when it ends (status.json holds it meanwhile)."""

    def __init__(self, clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.log = logs.get("collector")
        self.current: set[str] = set()

    def update(self, found: list[tuple[str, str]]) -> None:
        now = {what for what, _ in found}
        for what, text in found:
            if what not in self.current:
                logs.event(self.log, logging.ERROR, "collector stalled", what=what, problem=text)
        for what in sorted(self.current - now):
            logs.event(self.log, logging.WARNING, "collector moving again", what=what)
        self.current = now


def _passes(snap: CollectorSnapshot, v: Assessment, limits: Limits, young: bool) -> None:
    age = v.ages["last_pass_at"]
    limit = STALLED_PASSES * (snap.graph_interval or 0) + limits.startup_grace
    if age is None:
        if not young and (v.ages["started_at"] or 0) > limit:
            v.problems.append("no Resource Graph pass has ended since the collector started")
    elif age > limit:
        v.problems.append(
            f"last Resource Graph pass {age:.0f}s ago (limit {limit:.0f}s): passes stalled"
        )


def warnings(s: CollectorSnapshot) -> list[str]:
    out = [
        f"{n} {what}"
        for n, what in (
            (s.dropped, "row(s) dropped by the spool bound"),
            (s.dead_lettered, "row(s) dead-lettered"),
            (
                s.dead_letters_dropped,
                "dead-lettered row(s) dropped from the dead-letter file (at its bound)",
            ),
            (s.parse_failures, "unreadable event(s) skipped (see the log)"),
            (s.set_aside, "unreadable message(s) or event(s) kept in unreadable-messages.jsonl"),
            (s.names_cut, "VM name(s) past the per-event cap, not recorded (see the log)"),
            (s.truncated_values, "value(s) cut to 32 KB (see the log)"),
            (s.unknown_statuses, "row(s) with an undocumented EventStatus (see the log)"),
            (s.unexpanded_events, "scale-set event(s) naming no VM, kept on the scale set"),
            (s.checkpoint_failures, "checkpoint(s) not saved (the rows are read again)"),
            (
                s.ack_forbidden,
                "approval(s) refused (403): the collector's identity lacks the role "
                "Scheduled Event Contributor on the VMs (see the log)",
            ),
            (s.ack_failed, "approval(s) given up or refused (see the Approval rows)"),
        )
        if n
    ]
    if s.agents_error:
        out.append(
            "the agents' heartbeats cannot be read, so the collector approves nothing: "
            f"{s.agents_error}"
        )
    if s.last_pass_ok is False:
        out.append(f"last Resource Graph pass failed: {s.last_pass_error or 'unknown error'}")
    if s.last_receive_error and any(p.owned for p in s.partitions.values()):
        out.append(f"Event Hub: {s.last_receive_error} (the client retries)")
    out += [
        f"sink {name}: {sink.last_error}"
        for name, sink in sorted(s.sinks.items())
        if sink.last_error
    ]
    return out


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return "in the future (clock skew?)" if seconds < 0 else f"{seconds:.0f}s ago"


def render_text(
    snap: CollectorSnapshot | None, verdict: Assessment, state_dir: Path, now: float
) -> str:
    head = f"se-forwarder collector: {verdict.state.upper()}"
    if snap is not None and snap.pid is not None:
        head += f" (pid {snap.pid}, version {snap.version}, channel {snap.channel})"
    lines = [head, f"  state dir:    {state_dir}"]
    lines += [f"  PROBLEM:      {p}" for p in verdict.problems]
    lines += [f"  warning:      {w}" for w in verdict.warnings]
    if snap is None:
        return "\n".join(lines) + "\n"
    s = snap
    lines += [
        f"  status file:  written {_ago(verdict.ages.get('written_at'))}",
        (
            f"  read:         {s.events} event(s), {s.parse_failures} unreadable, "
            f"{s.ignored_events} ignored, {s.expanded_events} scale-set event(s) expanded, "
            f"{s.unexpanded_events} not"
        ),
        (
            f"  committed:    {s.committed} row(s); duplicates dropped: "
            f"{s.duplicate_notifications} notification(s), {s.duplicate_records} row(s)"
        ),
        (
            f"  records:      delivered {s.delivered}, failed deliveries {s.failed_deliveries}, "
            f"dropped {s.dropped}, dead-lettered {s.dead_lettered}, spool {s.spool_depth}"
        ),
    ]
    for pid, p in sorted(s.partitions.items()):
        last = "never" if p.last_event_at is None else _ago(now - p.last_event_at)
        saved = "never" if p.last_checkpoint_at is None else _ago(now - p.last_checkpoint_at)
        lines.append(
            f"  partition {pid:<3} {'held' if p.owned else 'not held'}, {p.events} "
            f"event(s), last enqueued {last}, checkpoint saved {saved}"
        )
    if s.approvals:
        lines.append(
            f"  approvals:    PREVIEW acknowledge API: {s.ack_approved} approved, "
            f"{s.ack_started_before} started before approval, {s.ack_unknown_events} unknown, "
            f"{s.ack_forbidden} refused (role), {s.ack_failed} given up; "
            f"{s.ack_agent_events} left to their agent"
        )
    if s.graph_interval:
        lines.append(
            f"  graph:        {s.graph_passes} pass(es), {s.graph_queries} queries, "
            f"{s.graph_throttled} throttled, last pass {_ago(verdict.ages['last_pass_at'])}"
        )
    for name, sink in sorted(s.sinks.items()):
        last = "never" if sink.last_delivery_at is None else _ago(now - sink.last_delivery_at)
        lines.append(f"  sink {name:<11} spool {sink.spool_depth}, last delivery {last}")
    return "\n".join(lines) + "\n"


def report(
    data: Mapping[str, Any],
    state_dir: Path,
    limits: Limits,
    *,
    as_json: bool,
    process_alive: Callable[[int], bool | None] | None,
) -> int:
    """Print the verdict (text, or one JSON object as the agent's); 0 healthy, 1 not."""
    snap, problems = read_snapshot(data)
    now = SYSTEM.wall_seconds()
    verdict = evaluate(
        snap, now=now, limits=limits, read_problems=problems, process_alive=process_alive
    )
    if as_json:
        out = verdict.as_dict() | {"state_dir": str(state_dir), "status": dict(data)}
        print(json.dumps(out, sort_keys=True))
    else:
        print(render_text(snap, verdict, state_dir, now), end="")
    return 0 if verdict.healthy else 1
