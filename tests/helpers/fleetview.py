"""The fleet view's answers computed in plain Python from the same rows the KQL reads: the rules of
dashboards/README.md written a second time, independently, so a query is held to numbers it did
not produce. Rows are the generator's dicts (contract shape plus ``_IngestionTime``)."""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from itertools import compress
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


class Timed(list[Row]):
    """Rows in TimeGenerated order with those times beside them (``visible``'s answer): ``since``
    and ``latest`` take the times from here instead of reading every row's time again (the
    rules read the same rows at hundreds of moments)."""

    __slots__ = ("times",)

    def __init__(self, rows: Iterable[Row], times: list[datetime]) -> None:
        super().__init__(rows)
        self.times = times


def visible(rows: Iterable[Row], now: datetime, span: timedelta | None = None) -> Timed:
    """What a query at ``now`` sees: rows ingested by then, within the query's time range."""
    if not isinstance(rows, list):
        rows = list(rows)
    times, index = _by_time(rows)
    lo = 0 if span is None else bisect_left(times, now - span)
    hi = bisect_right(times, now)
    entries = index[lo:hi]
    keep = [ing <= now for ing, _ in entries]
    return Timed(compress((r for _, r in entries), keep), list(compress(times[lo:hi], keep)))


_INDEX: dict[int, tuple[int, list, tuple[list, list]]] = {}


def _by_time(rows: list[Row]) -> tuple[list[datetime], list[tuple[datetime, Row]]]:
    """The rows sorted by TimeGenerated with their ingestion times, kept per list (the fleet's
    lists are evaluated at hundreds of moments; a list that grew is indexed again)."""
    key = id(rows)
    hit = _INDEX.get(key)
    if hit is not None and hit[0] == len(rows) and hit[1] is rows:
        return hit[2]
    ordered = sorted(((at(r), ts(r["_IngestionTime"]), r) for r in rows), key=lambda x: x[0])
    built = ([t for t, _, _ in ordered], [(ing, r) for _, ing, r in ordered])
    if len(rows) > 5000:  # only the fleets: small datasets change between calls
        _INDEX[key] = (len(rows), rows, built)
    return built


def timed(rows: Iterable[Row]) -> Iterable[tuple[datetime, Row]]:
    """(TimeGenerated, row) of each row, the times read once by ``visible`` where it gave them."""
    if isinstance(rows, Timed):
        return zip(rows.times, rows, strict=True)
    return ((at(r), r) for r in rows)


def dedupe(rows: Iterable[Row]) -> list[Row]:
    """One row per RecordId (every copy of a record is the same record)."""
    return list({r["RecordId"]: r for r in rows}.values())


def since(rows: Iterable[Row], now: datetime, span: timedelta) -> list[Row]:
    """The rows newer than ``now - span`` (the list itself when that is all of it, so the
    answers kept per list, ``last_per``, serve it again)."""
    start = now - span
    if isinstance(rows, Timed):
        cut = bisect_right(rows.times, start)
        return rows if cut == 0 else Timed(rows[cut:], rows.times[cut:])
    out = [r for r in rows if at(r) > start]
    return rows if isinstance(rows, list) and len(out) == len(rows) else out


def latest(rows: Iterable[Row], *keys: str) -> dict[tuple, Row]:
    """The latest row per key (by TimeGenerated)."""
    out: dict[tuple, Row] = {}
    best: dict[tuple, datetime] = {}
    one = keys[0] if len(keys) == 1 else None
    for t, r in timed(rows):
        k = (r[one],) if one is not None else tuple(r[x] for x in keys)
        b = best.get(k)
        if b is None or t > b:
            best[k], out[k] = t, r
    return out


_LAST: list = [None, None, None]  # [rows, key, answer]: the one list last asked about


def last_per(rows: list[Row], key: str) -> dict[tuple, Row]:
    """``latest`` of the rows that have ``key``, per key; kept for the last list asked about (a
    moment's rules ask it of one list of heartbeats three or four times; the rows are never
    changed once listed; small lists, which tests build and change, are not kept)."""
    if len(rows) <= 5000:
        return latest(having(rows, key), key)
    if _LAST[0] is not rows or _LAST[1] != key or _LAST[2][0] != len(rows):
        _LAST[:] = [rows, key, (len(rows), latest(having(rows, key), key))]
    return _LAST[2][1]


def having(rows: list[Row], key: str) -> list[Row]:
    """The rows with a value of ``key``, with their times when they came with them (a filtered
    copy of ``visible``'s answer keeps what ``since`` and ``latest`` read)."""
    if isinstance(rows, Timed):
        # the value read once per row; two lists, not a list of pairs (a pair per heartbeat
        # wakes the garbage collector over the whole fleet)
        keep = [bool(r.get(key)) for r in rows]
        return Timed(compress(rows, keep), list(compress(rows.times, keep)))
    return [r for r in rows if r.get(key)]


def percentile(values: list[float], p: float) -> float:
    """Nearest rank, as Kusto's percentile() on a small set."""
    s = sorted(values)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def kusto_round(x: float, digits: int = 0) -> float:
    """Round half away from zero (Kusto's round)."""
    f = 10**digits
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
            same = (
                prev is not None
                and r["Reason"] != "start"
                and abs((run_start(r) - run_start(prev)).total_seconds()) < 30
            )
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


def replaced_at(beats: Iterable[Row], key: str = "VmId") -> dict[str, datetime]:
    """VMs recreated under the same resource id (any casing): a newer VmId reported after them."""
    last = (
        last_per(beats, key)
        if isinstance(beats, list)
        else latest([b for b in beats if b.get(key)], key)
    )
    by_resource: dict[str, list[Row]] = defaultdict(list)
    for b in last.values():
        by_resource[b["VmResourceId"].lower()].append(b)
    out = {}
    for rows in by_resource.values():
        for r in rows:
            if any(o[key] != r[key] and at(o) > at(r) for o in rows):
                out[r[key]] = at(r)
    return out


def agent_status(
    records: list[Row],
    beats: list[Row],
    now: datetime,
    key: str = "VmId",
    lookback: timedelta = timedelta(days=7),
    degraded: bool = True,
) -> dict[str, str]:
    """gone / stopped / silent / degraded / ok per VM (dashboards/definitions/vm-state.kql); a VM
    whose last heartbeat is within 30 minutes of the range's start is out of the view."""
    recs = since(records, now, lookback)
    hb = since(beats, now, lookback)
    gone = gone_at(recs, now, key)
    for vm, t in replaced_at(hb, key).items():
        gone[vm] = max(gone.get(vm, t), t)
    trend: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    if degraded:
        for s in steps(since(hb, now, timedelta(hours=3)), key):
            for col in ("Polls", "PollErrors", "DroppedRecords", "DeadLetteredRecords"):
                trend[s.row[key]][col] += s.inc(col)
    first: dict[str, Row] = {}  # each heartbeat's first copy: a redelivered one is no news
    for r in hb:
        if r["RecordId"] not in first or ts(r["_IngestionTime"]) < ts(
            first[r["RecordId"]]["_IngestionTime"]
        ):
            first[r["RecordId"]] = r
    recent, spooled = now - timedelta(minutes=15), timedelta(minutes=10)
    lately = {
        r[key]
        for r in first.values()
        if ts(r["_IngestionTime"]) > recent and ts(r["_IngestionTime"]) - at(r) > spooled
    }  # spooled through a downtime
    out = {}
    for (vm,), last in last_per(hb, key).items():
        t = at(last)
        if t <= now - lookback + timedelta(minutes=30):
            continue
        g = gone.get(vm)
        d = trend[vm]
        rate = d["PollErrors"] * 100.0 / d["Polls"] if d["Polls"] > 0 else None
        if g is not None and g >= t - timedelta(minutes=30):
            out[vm] = "gone"
        elif last["Reason"] == "stop" and t > now - timedelta(hours=1):
            out[vm] = "stopped"
        elif t <= now - timedelta(minutes=15) and vm not in lately:
            out[vm] = "silent"
        elif degraded and (
            d["DroppedRecords"] > 0
            or d["DeadLetteredRecords"] > 0
            or last["SpoolDepth"] > 1000
            or (rate is not None and round(rate, 2) > 5)
        ):
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
            eid,
            freshest["EventType"],
            {r["VmId"] for r in lasts if r["AffectsThisVm"] is True},
            {r["VmId"] for r in lasts},
            any(r["Phase"] == "Started" or r["Outcome"] == "Completed" for r in rows),
            any(r["Outcome"] == "Cancelled" for r in rows),
            any(r["Phase"] == "Removed" for r in rows),
            min(ts(r["FirstSeenAt"]) for r in rows),
            min(started) if started else None,
            ts(max(with_nb, key=at)["NotBefore"]) if with_nb else None,
            freshest["DurationInSeconds"],
        )
    return out


@dataclass
class Word:
    """A VM's latest word on an event (dashboards/definitions/event-state.kql)."""

    at: datetime
    from_beat: bool
    open: bool
    event_type: str
    status: str
    not_before: datetime | None
    affects: bool | None
    name: str
    resource_id: str
    nb_at: tuple = ()  # when its NotBefore was said (ordering of the latest known)


def words(records: list[Row], beats: list[Row]) -> dict[tuple[str, str], Word]:
    """(EventId, VmId) -> the VM's latest word: its latest heartbeat's OpenEventList when that
    heartbeat is at least as new as its latest record of the event, else that record."""
    last_beat = {vm: b for (vm,), b in last_per(beats, "VmId").items()}
    recs = [r for r in records if r.get("VmId") and r["Phase"] != "Approved"]
    out: dict[tuple[str, str], Word] = {}
    nb_seen: dict[tuple[str, str], tuple[tuple, datetime]] = {}
    for (eid, vm), r in latest(recs, "EventId", "VmId").items():
        out[(eid, vm)] = Word(
            at(r),
            False,
            r["Phase"] != "Removed",
            r["EventType"],
            "Removed" if r["Phase"] == "Removed" else r["EventStatus"],
            ts(r["NotBefore"]),
            r["AffectsThisVm"],
            r["VmName"],
            r["VmResourceId"],
        )
        if r["NotBefore"]:
            nb_seen[(eid, vm)] = ((at(r), False), ts(r["NotBefore"]))
    for vm, b in last_beat.items():
        if b["OpenEventList"] is None:
            continue
        listed = {o["EventId"]: o for o in b["OpenEventList"]}
        for o in listed.values():
            w = out.get((o["EventId"], vm))
            if w is None or at(b) >= w.at:
                out[(o["EventId"], vm)] = Word(
                    at(b),
                    True,
                    True,
                    o["EventType"],
                    o["EventStatus"],
                    ts(o["NotBefore"]),
                    o["AffectsThisVm"],
                    b["VmName"],
                    b["VmResourceId"],
                )
                if o["NotBefore"]:
                    nb_seen[(o["EventId"], vm)] = ((at(b), True), ts(o["NotBefore"]))
        for (eid, v), w in list(out.items()):
            if v == vm and eid not in listed and at(b) >= w.at:
                out[(eid, v)] = Word(
                    at(b),
                    True,
                    False,
                    w.event_type,
                    "Removed",
                    w.not_before,
                    w.affects,
                    w.name,
                    w.resource_id,
                )
                if (eid, v) in nb_seen:
                    nb_seen[(eid, v)] = ((at(b), True), nb_seen[(eid, v)][1])
    for k, w in out.items():  # the latest known NotBefore of this VM
        if k in nb_seen:
            w.nb_at, w.not_before = nb_seen[k]
    return out


def open_events(
    records: list[Row], beats: list[Row], now: datetime, lookback: timedelta = timedelta(days=14)
) -> set[str]:
    """The one definition of "open" (dashboards/definitions/event-state.kql): the freshest word of
    a VM that is reporting, else the freshest word; closed besides when a Terminate/Preempt is due
    15 minutes ago, or none of its VMs sent a heartbeat since it was due, 30 minutes on."""
    return {eid for eid, e in event_states(records, beats, now, lookback).items() if e["open"]}


def event_states(
    records: list[Row], beats: list[Row], now: datetime, lookback: timedelta = timedelta(days=14)
) -> dict[str, dict]:
    recs = dedupe(since(records, now, lookback))
    hb = since(beats, now, lookback)
    status = agent_status(recs, hb, now, lookback=lookback, degraded=False)
    last_beat = {vm: at(b) for (vm,), b in last_per(hb, "VmId").items() if vm in status}
    facts = events(recs)
    by_event: dict[str, list[tuple[str, Word]]] = defaultdict(list)
    for (eid, vm), w in words(recs, hb).items():
        by_event[eid].append((vm, w))
    out = {}
    for eid, ws in by_event.items():

        def order(x):
            return (x[1].at, x[1].from_beat)

        fresh = max(ws, key=order)[1]
        current = [x for x in ws if status.get(x[0]) == "reporting"]
        is_open = (max(current, key=order)[1] if current else fresh).open
        f = facts.get(eid)
        with_nb = [x for x in ws if x[1].not_before is not None]
        nb = max(with_nb, key=lambda x: x[1].nb_at)[1].not_before if with_nb else None
        started = (f is not None and f.started_at is not None) or any(
            w.status == "Started" for _, w in ws
        )
        due = (f.started_at if f is not None and f.started_at else None) or nb
        heard = [last_beat[vm] for vm, _ in ws if vm in last_beat]
        if fresh.event_type in GONE_TYPES and due is not None and due < now - timedelta(minutes=15):
            is_open = False
        if (
            due is not None
            and due < now - timedelta(minutes=30)
            and (not heard or max(heard) < due)
        ):
            is_open = False
        out[eid] = {
            "open": is_open,
            "type": fresh.event_type,
            "not_before": nb,
            "status": "Started" if started else "Scheduled",
            "words": dict(ws),
        }
    return out
