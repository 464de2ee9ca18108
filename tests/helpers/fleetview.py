"""The fleet view's answers computed in plain Python from the same rows the KQL reads: the rules of
dashboards/README.md written a second time, independently, so a query is held to numbers it did
not produce. Rows are the generator's dicts (contract shape plus ``_IngestionTime``)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

Row = dict[str, Any]
IMPACTFUL = ("Reboot", "Redeploy", "Preempt", "Terminate")
GONE_TYPES = ("Terminate", "Preempt")


@lru_cache(maxsize=1_000_000)
def ts(text: str | None) -> datetime | None:
    """A contract datetime as a naive UTC datetime (what the engine returns)."""
    if not text:
        return None
    return datetime.fromisoformat(text).astimezone(UTC).replace(tzinfo=None)


def at(row: Row) -> datetime:
    return ts(row["TimeGenerated"])


def visible(rows: Iterable[Row], now: datetime, span: timedelta | None = None) -> list[Row]:
    """What a query at ``now`` sees: rows ingested by then, within the query's time range."""
    out = []
    for r in rows:
        if ts(r["_IngestionTime"]) > now:
            continue
        if span is not None and not (now - span <= at(r) <= now):
            continue
        out.append(r)
    return out


def dedupe(rows: Iterable[Row]) -> list[Row]:
    """One row per RecordId (every copy of a record is the same record)."""
    return list({r["RecordId"]: r for r in rows}.values())


def since(rows: Iterable[Row], now: datetime, span: timedelta) -> list[Row]:
    return [r for r in rows if at(r) > now - span]


def latest(rows: Iterable[Row], *keys: str) -> dict[tuple, Row]:
    """The latest row per key (by TimeGenerated)."""
    out: dict[tuple, Row] = {}
    for r in rows:
        k = tuple(r[x] for x in keys)
        if k not in out or at(r) > at(out[k]):
            out[k] = r
    return out


def percentile(values: list[float], p: float) -> float:
    """Nearest rank, as Kusto's percentile() on a small set."""
    s = sorted(values)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def kusto_round(x: float, digits: int = 0) -> float:
    """Round half away from zero (Kusto's round)."""
    f = 10 ** digits
    return math.floor(abs(x) * f + 0.5) / f * (1 if x >= 0 else -1)


# -- heartbeats -------------------------------------------------------------------------------


@dataclass
class Step:
    """A heartbeat with the counter increases since the one before it (dashboards/README.md)."""

    row: Row
    prev: Row | None
    same_run: bool
    fresh: bool

    def inc(self, col: str) -> int:
        if self.same_run:
            return self.row[col] - self.prev[col]
        return self.row[col] if self.fresh else 0


def run_start(row: Row) -> datetime:
    return at(row) - timedelta(seconds=row["UptimeSeconds"])


def steps(beats: Iterable[Row], key: str = "VmId") -> list[Step]:
    by_vm: dict[str, list[Row]] = defaultdict(list)
    for r in dedupe(beats):
        if r.get(key):
            by_vm[r[key]].append(r)
    out = []
    for rows in by_vm.values():
        rows.sort(key=at)
        prev = None
        for r in rows:
            same = (prev is not None and r["Reason"] != "start"
                    and abs((run_start(r) - run_start(prev)).total_seconds()) < 30)
            out.append(Step(r, prev, same, r["Reason"] == "start" or prev is not None))
            prev = r
    return out


def gone_at(records: Iterable[Row], now: datetime, key: str = "VmId") -> dict[str, datetime]:
    """When each VM was deleted, scaled in or evicted: a Terminate/Preempt for it (its latest
    record of the event) that started, or whose NotBefore passed and was not cancelled."""
    by: dict[tuple, list[Row]] = defaultdict(list)
    for r in records:
        if r.get(key):
            by[(r[key], r["EventId"])].append(r)
    out: dict[str, datetime] = {}
    for (vm, _), rows in by.items():
        last = max(rows, key=at)
        if last["EventType"] not in GONE_TYPES or last["AffectsThisVm"] is not True:
            continue
        started = [ts(r["StartedAt"]) for r in rows if r["StartedAt"]]
        cancelled = any(r["Outcome"] == "Cancelled" for r in rows)
        nb = ts(last["NotBefore"])
        when = min(started) if started else (nb if (not cancelled and nb and nb < now) else None)
        if when and (vm not in out or when > out[vm]):
            out[vm] = when
    return out


def agent_status(records: list[Row], beats: list[Row], now: datetime, key: str = "VmId",
                 lookback: timedelta = timedelta(days=7), degraded: bool = True) -> dict[str, str]:
    """gone / stopped / silent / degraded / ok per VM (dashboards/README.md)."""
    recs = since(records, now, lookback)
    hb = since(beats, now, lookback)
    gone = gone_at(recs, now, key)
    trend: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    if degraded:
        for s in steps(since(hb, now, timedelta(hours=3)), key):
            for col in ("Polls", "PollErrors", "DroppedRecords", "DeadLetteredRecords"):
                trend[s.row[key]][col] += s.inc(col)
    out = {}
    for (vm,), last in latest([r for r in hb if r.get(key)], key).items():
        t = at(last)
        g = gone.get(vm)
        d = trend[vm]
        rate = d["PollErrors"] * 100.0 / d["Polls"] if d["Polls"] > 0 else None
        if g is not None and g >= t - timedelta(minutes=30):
            out[vm] = "gone"
        elif last["Reason"] == "stop" and t > now - timedelta(hours=1):
            out[vm] = "stopped"
        elif t <= now - timedelta(minutes=15):
            out[vm] = "silent"
        elif degraded and (d["DroppedRecords"] > 0 or d["DeadLetteredRecords"] > 0
                           or last["SpoolDepth"] > 1000 or (rate is not None and round(rate, 2) > 5)):
            out[vm] = "degraded"
        else:
            out[vm] = "ok" if degraded else "reporting"
    return out


# -- events -------------------------------------------------------------------------------------


@dataclass
class Event:
    """Event-level facts (each VM's latest record, summarized per EventId)."""

    event_id: str
    event_type: str
    vms_hit: set[str]
    reporting: set[str]
    started: bool
    cancelled: bool
    removed: bool
    first_seen: datetime
    started_at: datetime | None
    not_before: datetime | None
    duration: int | None


def events(records: list[Row]) -> dict[str, Event]:
    recs = dedupe(records)
    per_vm = latest(recs, "EventId", "VmId")
    by_event: dict[str, list[Row]] = defaultdict(list)
    for r in recs:
        by_event[r["EventId"]].append(r)
    out = {}
    for eid, rows in by_event.items():
        lasts = [v for (e, _), v in per_vm.items() if e == eid]
        freshest = max(lasts, key=at)
        with_nb = [r for r in rows if r["NotBefore"]]
        started = [ts(r["StartedAt"]) for r in rows if r["StartedAt"]]
        out[eid] = Event(
            eid, freshest["EventType"], {r["VmId"] for r in lasts if r["AffectsThisVm"] is True},
            {r["VmId"] for r in lasts},
            any(r["Phase"] == "Started" or r["Outcome"] == "Completed" for r in rows),
            any(r["Outcome"] == "Cancelled" for r in rows),
            any(r["Phase"] == "Removed" for r in rows),
            min(ts(r["FirstSeenAt"]) for r in rows), min(started) if started else None,
            ts(max(with_nb, key=at)["NotBefore"]) if with_nb else None,
            freshest["DurationInSeconds"])
    return out


def open_events(records: list[Row], beats: list[Row], now: datetime,
                lookback: timedelta = timedelta(days=14)) -> set[str]:
    """The one definition of "open" (dashboards/README.md)."""
    recs = dedupe(since(records, now, lookback))
    hb = since(beats, now, lookback)
    last_beat = {vm: r for (vm,), r in latest([r for r in hb if r.get("VmId")], "VmId").items()}
    facts = events(recs)
    open_on: dict[str, bool] = defaultdict(bool)
    heard: dict[str, datetime | None] = defaultdict(lambda: None)
    for (eid, vm), r in latest(recs, "EventId", "VmId").items():
        b = last_beat.get(vm)
        if b is not None and at(b) >= at(r) and b["OpenEventList"] is not None:
            here = any(o["EventId"] == eid for o in b["OpenEventList"])
        else:
            here = r["Phase"] != "Removed"
        open_on[eid] |= here
        if b is not None and (heard[eid] is None or at(b) > heard[eid]):
            heard[eid] = at(b)
    out = set()
    for eid, e in facts.items():
        due = e.started_at or e.not_before
        if not open_on[eid]:
            continue
        if e.event_type in GONE_TYPES and due is not None and due < now - timedelta(minutes=15):
            continue
        if due is not None and due < now - timedelta(minutes=30) and (
                heard[eid] is None or heard[eid] < due):
            continue
        out.add(eid)
    return out
