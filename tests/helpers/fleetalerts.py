"""What each alert rule should return at an evaluation moment, computed in Python from the rows
visible then (ingested by that moment, inside the rule's query time range): the rules of
dashboards/README.md for alerts, written independently of the KQL."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from . import fleetview as fv

Row = fv.Row
MIN = timedelta(minutes=1)


def _fmt(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def agent_silent(records: list[Row], beats: list[Row], now: datetime) -> set[tuple]:
    status = fv.agent_status(records, beats, now, key="VmResourceId", lookback=timedelta(days=2),
                             degraded=False)
    last = fv.latest([b for b in beats if b["VmResourceId"]], "VmResourceId")
    return {(vm, _fmt(fv.at(last[(vm,)]))) for vm, s in status.items() if s == "silent"}


def delivery_trouble(beats: list[Row], now: datetime,
                     window: timedelta = timedelta(minutes=30)) -> set[tuple]:
    """The heartbeats whose FIRST copy arrived in the window, each paired with the one before it
    (looked for within the hour before the earliest of them); increases summed per VM."""
    first: dict[str, Row] = {}
    for r in beats:
        if r.get("VmResourceId") and (r["RecordId"] not in first or fv.ts(r["_IngestionTime"])
                                      < fv.ts(first[r["RecordId"]]["_IngestionTime"])):
            first[r["RecordId"]] = r
    arrived = {rid for rid, r in first.items() if fv.ts(r["_IngestionTime"]) > now - window}
    since: dict[str, datetime] = {}
    for rid in arrived:
        r = first[rid]
        vm = r["VmResourceId"]
        since[vm] = min(since.get(vm, fv.at(r)), fv.at(r))
    scope = [r for r in first.values() if r["VmResourceId"] in since
             and fv.at(r) >= since[r["VmResourceId"]] - timedelta(hours=1)]
    per: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for s in fv.steps(scope, key="VmResourceId"):
        if s.row["RecordId"] not in arrived:
            continue
        d = per[s.row["VmResourceId"]]
        d["pairs"] += s.same_run
        d["growing"] += s.same_run and s.row["SpoolDepth"] > s.prev["SpoolDepth"]
        for col in ("FailedDeliveries", "DroppedRecords", "DeadLetteredRecords"):
            d[col] += s.inc(col)
    return {(vm,) for vm, d in per.items()
            if (d["pairs"] >= 2 and d["growing"] == d["pairs"]) or d["FailedDeliveries"] > 0
            or d["DroppedRecords"] > 0 or d["DeadLetteredRecords"] > 0}


def scheduled_for(records: list[Row], beats: list[Row], now: datetime, key: str) -> dict[tuple, dict]:
    """Per (VM, EventId): the latest word on an impactful event scheduled for that VM."""
    last_beat = {vm: b for (vm,), b in fv.latest([b for b in beats if b[key]], key).items()}
    word: dict[tuple, dict] = {}
    for vm, b in last_beat.items():
        for o in b["OpenEventList"] or []:
            word[(vm, o["EventId"])] = {"at": fv.at(b), "type": o["EventType"], "status": o["EventStatus"],
                                        "nb": fv.ts(o["NotBefore"]), "affects": o["AffectsThisVm"],
                                        "name": b["VmName"]}
    recs = [r for r in records if r[key] and r["Phase"] != "Approved"]
    for (vm, eid), r in fv.latest(recs, key, "EventId").items():
        b = last_beat.get(vm)
        if b is None or b["OpenEventList"] is None or fv.at(r) > fv.at(b):
            word[(vm, eid)] = {"at": fv.at(r), "type": r["EventType"], "affects": r["AffectsThisVm"],
                               "status": "Removed" if r["Phase"] == "Removed" else r["EventStatus"],
                               "nb": fv.ts(r["NotBefore"]), "name": r["VmName"]}
    first: dict[tuple, datetime] = {}
    for r in recs:
        k = (r[key], r["EventId"])
        first[k] = min(first.get(k, fv.ts(r["FirstSeenAt"])), fv.ts(r["FirstSeenAt"]))
    out = {}
    for k, w in word.items():
        if w["status"] == "Scheduled" and w["affects"] is True and w["type"] in fv.IMPACTFUL \
                and (w["nb"] is None or w["nb"] > now - timedelta(hours=1)):
            out[k] = {**w, "first": first.get(k)}
    return out


def impactful_per_vm(records: list[Row], beats: list[Row], now: datetime) -> set[tuple]:
    out = set()
    for (vm, eid), w in scheduled_for(records, beats, now, "VmResourceId").items():
        nb, first = w["nb"], w["first"]
        if nb is None:
            notice = "unknown"
        elif first is None or (nb - first) / MIN >= 2820:
            notice = "47 h or more"
        else:
            notice = str(int(fv.kusto_round((nb - first) / MIN)))
        out.add((vm, eid, w["type"], "unknown" if nb is None else _fmt(nb), notice))
    return out


def impactful_fleet(records: list[Row], beats: list[Row], now: datetime) -> dict[tuple, int]:
    by: dict[str, list] = defaultdict(list)
    for (vm, eid), w in scheduled_for(records, beats, now, "VmId").items():
        by[eid].append((vm, w))
    out = {}
    for eid, ws in by.items():
        latest = max(ws, key=lambda x: x[1]["at"])[1]
        nbs = [w["nb"] for _, w in ws if w["nb"] is not None]
        out[(None, eid, latest["type"], _fmt(min(nbs)) if nbs else "unknown")] = len({vm for vm, _ in ws})
    return out


def _first_copies(rows: list[Row]) -> list[Row]:
    first: dict[str, Row] = {}
    for r in rows:
        k = r["RecordId"]
        if k not in first or fv.ts(r["_IngestionTime"]) < fv.ts(first[k]["_IngestionTime"]):
            first[k] = r
    return list(first.values())


def started_without_notice(records: list[Row], beats: list[Row], now: datetime) -> set[tuple]:
    hits = [r for r in records if r["Phase"] == "FirstSeen" and r["EventStatus"] == "Started"
            and r["UncertaintySeconds"] is not None and r["UncertaintySeconds"] <= 10]
    names = {}
    for (name, sub, rg), b in fv.latest(
            [{**b, "Key": b["VmName"].lower()} for b in beats if b["VmName"] and b["VmResourceId"]],
            "Key", "SubscriptionId", "ResourceGroup").items():
        names[(name, sub, rg)] = b["VmResourceId"]
    out = set()
    for r in _first_copies(hits):
        if fv.ts(r["_IngestionTime"]) <= now - timedelta(minutes=15):
            continue
        for n in r["Resources"]:
            rid = names.get((n.lstrip("_").lower(), r["SubscriptionId"], r["ResourceGroup"]))
            if rid:
                out.add((rid, r["EventId"], r["EventType"]))
    return out


def many_vms_hit(records: list[Row], now: datetime) -> int | None:
    """The most distinct VMs whose own event started in one window of ten whole minutes that
    holds a start whose first copy arrived in the last 10 minutes (None: no such start)."""
    started = _first_copies([r for r in records if r["Phase"] == "Started" and r["AffectsThisVm"] is True
                             and r["VmId"] and r["EventType"] not in ("Terminate", "Preempt")
                             and r["EventSource"] != "User"])

    def minute(r: Row) -> datetime:
        return fv.at(r).replace(second=0, microsecond=0)

    new = [r for r in started if fv.ts(r["_IngestionTime"]) > now - timedelta(minutes=10)]
    windows = {minute(r) - k * MIN for r in new for k in range(10)}
    best = None
    for w in windows:
        vms = {r["VmId"] for r in started if w <= minute(r) < w + 10 * MIN}
        best = max(best or 0, len(vms))
    return best
