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
    beats = fv.having(beats, "VmResourceId")
    status = fv.agent_status(records, beats, now, lookback=timedelta(days=2), degraded=False)
    last = fv.last_per(beats, "VmId")
    return {
        (last[(vm,)]["VmResourceId"], _fmt(fv.at(last[(vm,)])))
        for vm, s in status.items()
        if s == "silent"
    }


def delivery_trouble(
    beats: list[Row], now: datetime, window: timedelta = timedelta(minutes=30)
) -> set[tuple]:
    """The heartbeats whose FIRST copy arrived in the window, each paired with the one before it
    (looked for within the hour before the earliest of them); increases summed per VM."""
    first: dict[str, Row] = {}
    for r in beats:
        if r.get("VmResourceId") and (
            r["RecordId"] not in first
            or fv.ts(r["_IngestionTime"]) < fv.ts(first[r["RecordId"]]["_IngestionTime"])
        ):
            first[r["RecordId"]] = r
    arrived = {rid for rid, r in first.items() if fv.ts(r["_IngestionTime"]) > now - window}
    since: dict[str, datetime] = {}
    for rid in arrived:
        r = first[rid]
        vm = r["VmResourceId"]
        since[vm] = min(since.get(vm, fv.at(r)), fv.at(r))
    scope = [
        r
        for r in first.values()
        if r["VmResourceId"] in since and fv.at(r) >= since[r["VmResourceId"]] - timedelta(hours=1)
    ]
    per: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for s in fv.steps(scope, key="VmResourceId"):
        if s.row["RecordId"] not in arrived:
            continue
        d = per[s.row["VmResourceId"]]
        d["pairs"] += s.same_run
        d["growing"] += s.same_run and s.row["SpoolDepth"] > s.prev["SpoolDepth"]
        for col in ("FailedDeliveries", "DroppedRecords", "DeadLetteredRecords"):
            d[col] += s.inc(col)
    return {
        (vm,)
        for vm, d in per.items()
        if (d["pairs"] >= 2 and d["growing"] == d["pairs"])
        or d["FailedDeliveries"] > 0
        or d["DroppedRecords"] > 0
        or d["DeadLetteredRecords"] > 0
    }


def scheduled_for(records: list[Row], beats: list[Row], now: datetime) -> dict[tuple, fv.Word]:
    """Per (VmId, EventId): the VM's word on an open impactful event scheduled for it."""
    span = timedelta(days=2)
    out = {}
    for eid, e in fv.event_states(records, beats, now, span).items():
        if not e["open"]:
            continue
        for vm, w in e["words"].items():
            if (
                w.open
                and w.status == "Scheduled"
                and w.affects is True
                and (w.not_before is None or w.not_before > now - timedelta(hours=1))
            ):
                out[(vm, eid)] = (w, e)
    return out


def impactful_per_vm(records: list[Row], beats: list[Row], now: datetime) -> set[tuple]:
    return {
        (
            w.resource_id,
            eid,
            w.event_type,
            "unknown" if w.not_before is None else _fmt(w.not_before),
        )
        for (vm, eid), (w, _) in scheduled_for(records, beats, now).items()
        if w.event_type in fv.IMPACTFUL and w.resource_id
    }


def notice_minutes(records: list[Row], beats: list[Row], now: datetime) -> dict[tuple, str]:
    """(VmResourceId, EventId) -> the per-VM rule's NoticeMinutes column."""
    first: dict[tuple, datetime] = {}
    for r in records:
        if r["VmId"]:
            k = (r["VmId"], r["EventId"])
            first[k] = min(first.get(k, fv.ts(r["FirstSeenAt"])), fv.ts(r["FirstSeenAt"]))
    out = {}
    for (vm, eid), (w, _) in scheduled_for(records, beats, now).items():
        nb, f = w.not_before, first.get((vm, eid))
        if nb is None:
            out[(w.resource_id, eid)] = "unknown"
        elif f is None or (nb - f) / MIN >= 2820:
            out[(w.resource_id, eid)] = "47 h or more"
        else:
            out[(w.resource_id, eid)] = str(int(fv.kusto_round((nb - f) / MIN)))
    return out


def _vm_key(subscription: str, group: str, name: str) -> tuple[str, str, str]:
    """A VM as Azure names it: subscription, resource group, name, compared without case."""
    return (subscription.lower(), group.lower(), name.lower())


def _agent_vm_key(w: fv.Word) -> tuple[str, str, str]:
    """The VM of an agent's word: /subscriptions/<s>/resourceGroups/<g>/... of its resource id."""
    parts = w.resource_id.split("/")
    return _vm_key(parts[2], parts[4], w.name)


def azure_says(platform: list[Row]) -> dict[str, dict]:
    """EventId (lower case) -> Azure's own record of the event (ScheduledEventsPlatform_CL, one
    row per fact, the first copy of each RecordId counting): per VM its status (Completed or
    Canceled once said, else Started once said, else Scheduled), the type and NotBefore of its
    latest Scheduled row, and its name as Azure spells it; the event's type: its latest Scheduled
    row's."""
    out: dict[str, dict] = {}
    for r in sorted(_first_copies(platform), key=fv.at):
        if r["RecordType"] != "ScheduledEvent" or not r["EventId"]:
            continue
        e = out.setdefault(r["EventId"].lower(), {"id": r["EventId"], "vms": {}, "type": None})
        k = _vm_key(r["SubscriptionId"], r["ResourceGroup"], r["VmName"])
        vm = e["vms"].setdefault(k, {"name": r["VmName"], "ended": False, "started": False})
        if r["EventStatus"] in ("Completed", "Canceled"):
            vm["ended"] = True
        elif r["EventStatus"] == "Started":
            vm["started"] = True
        else:
            vm["type"], vm["not_before"] = r["EventType"], fv.ts(r["NotBefore"])
            e["type"] = r["EventType"]  # the latest Scheduled row's
    return out


def impactful_fleet_rows(
    records: list[Row], beats: list[Row], now: datetime, platform: list[Row] | None = None
) -> dict[str, dict]:
    """EventId -> {type, vms (VM key -> name), not_before}: every impactful event still Scheduled
    and open that an agent reported as affecting its VM (a word with AffectsThisVm true, open or
    not), with every VM it is open for, agent or not (issue 28). The event is as the agents' words
    say (type, NotBefore, started, open: ``fv.event_states``); on each VM its agent's word decides,
    else Azure's record (open while Scheduled or Started there). An event only Azure's record
    names is left to impactful-event-unwatched (one alert per incident). Stale an hour after
    NotBefore."""
    span = timedelta(days=2)
    azure = azure_says(platform or [])
    out: dict[str, dict] = {}
    for eid, a in fv.event_states(records, beats, now, span).items():
        mine: dict[tuple, tuple[str, bool]] = {}  # VM key -> (name, open for it)
        for w in a["words"].values():
            if w.affects is True:
                k = _agent_vm_key(w)
                mine[k] = (w.name, mine.get(k, (w.name, False))[1] or w.open)
        if not mine:  # no agent reported it as affecting its VM
            continue
        z = azure.get(eid.lower(), {"vms": {}})
        vms = {k: (vm["name"], not vm["ended"]) for k, vm in z["vms"].items()}
        vms.update(mine)
        etype, nb = a["type"], a["not_before"]
        if not (a["open"] and a["status"] == "Scheduled" and etype in fv.IMPACTFUL):
            continue
        if nb is not None and nb <= now - timedelta(hours=1):
            continue
        hit = {k: name for k, (name, o) in vms.items() if o}
        if hit:
            out[eid] = {"type": etype, "vms": hit, "not_before": nb}
    return out


def impactful_fleet(
    records: list[Row], beats: list[Row], now: datetime, platform: list[Row] | None = None
) -> dict[tuple, int]:
    """(None, EventId, EventType) -> VmsHit; the event's type is the latest known."""
    return {
        (None, eid, e["type"]): len(e["vms"])
        for eid, e in impactful_fleet_rows(records, beats, now, platform).items()
    }


def _first_copies(rows: list[Row]) -> list[Row]:
    first: dict[str, Row] = {}
    for r in rows:
        k = r["RecordId"]
        if k not in first or fv.ts(r["_IngestionTime"]) < fv.ts(first[k]["_IngestionTime"]):
            first[k] = r
    return list(first.values())


def hardware_failures(records: list[Row], beats: list[Row]) -> dict[tuple, dict]:
    """(EventId, VmResourceId of the VM hit) -> when its first record arrived (any sibling),
    whatever the event's type; names map to VMs case-insensitively."""
    hits = [
        r
        for r in records
        if r["Phase"] == "FirstSeen"
        and r["EventStatus"] == "Started"
        and r["UncertaintySeconds"] is not None
        and r["UncertaintySeconds"] <= 10
    ]
    names: dict[tuple, Row] = {}
    when: dict[tuple, datetime] = {}
    lowered: dict[tuple, tuple] = {}  # each VM's beats name it alike: lowered once
    for t, b in fv.timed(beats):
        if b["VmName"] and b["VmResourceId"]:
            given = (b["VmName"], b["SubscriptionId"], b["ResourceGroup"])
            k = lowered.get(given)
            if k is None:
                k = lowered[given] = tuple(x.lower() for x in given)
            if k not in names or t > when[k]:
                names[k], when[k] = b, t
    out: dict[tuple, dict] = {}
    for r in hits:
        for n in r["Resources"]:
            b = names.get(
                (n.lstrip("_").lower(), r["SubscriptionId"].lower(), r["ResourceGroup"].lower())
            )
            if b is None:
                continue
            k = (r["EventId"], b["VmResourceId"])
            ing = fv.ts(r["_IngestionTime"])
            if k not in out or ing < out[k]["first"]:
                out[k] = {"first": ing, "type": r["EventType"]}
            if fv.at(r) >= out[k].setdefault("at", fv.at(r)):
                out[k]["at"], out[k]["type"] = fv.at(r), r["EventType"]
    return out


def started_without_notice(records: list[Row], beats: list[Row], now: datetime) -> set[tuple]:
    return {
        (rid, eid, h["type"])
        for (eid, rid), h in hardware_failures(records, beats).items()
        if h["first"] > now - timedelta(minutes=15)
    }


def many_vms_hit(records: list[Row], now: datetime, threshold: int = 5) -> int | None:
    """The largest burst reported: windows [s, s + 10 min) anchored at each start s (the VM's
    earliest Started of the event) that hold a start whose first copy arrived in the last 10
    minutes and more than ``threshold`` VMs; not a window that overlaps one already over the
    threshold before those starts arrived, unless the burst's starts kept arriving (one 10 to 15
    minutes ago). None: nothing reported."""
    first: dict[tuple, tuple[datetime, datetime]] = {}
    for r in _first_copies(
        [
            r
            for r in records
            if r["Phase"] == "Started"
            and r["AffectsThisVm"] is True
            and r["VmId"]
            and r["EventType"] not in ("Terminate", "Preempt")
            and r["EventSource"] != "User"
        ]
    ):
        k = (r["VmId"], r["EventId"])
        t, ing = fv.at(r), fv.ts(r["_IngestionTime"])
        old = first.get(k)
        first[k] = (min(old[0], t), min(old[1], ing)) if old else (t, ing)
    starts = [(vm, t, ing, ing > now - 10 * MIN) for (vm, _), (t, ing) in first.items()]
    windows = {}
    for a in {t for _, t, _, _ in starts}:
        inside = [s for s in starts if a <= s[1] < a + 10 * MIN]
        old = [s for s in inside if not s[3]]
        windows[a] = {
            "hit": len({s[0] for s in inside}),
            "before": len({s[0] for s in old}),
            "new": sum(s[3] for s in inside),
            "last_old": max((s[2] for s in old), default=None),
        }
    crossed = [a for a, w in windows.items() if w["before"] > threshold]
    best = None
    for a, w in windows.items():
        if not (w["new"] and w["hit"] > threshold):
            continue
        paused = not (w["last_old"] is not None and w["last_old"] > now - 15 * MIN)
        if paused and any(abs(a - c) < 10 * MIN for c in crossed):
            continue
        best = max(best or 0, w["hit"])
    return best
