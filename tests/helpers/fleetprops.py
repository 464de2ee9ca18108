"""The churning fleet's properties (tests/fleet_view/test_churn_fleet*.py): the views at many
moments and every alert rule at its transition points, held to the truth (fleetchurn)."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from se_forwarder.report import Engine
from se_forwarder_testbed.fleet import Fleet
from se_forwarder_testbed.fleet.documents import view_at

from . import fleetchurn as fc
from . import fleetview as fv
from .fleetrun import evaluate_at, library, moments, rules, workbook

MIN = timedelta(minutes=1)
_CELL = re.compile(r"^(?:web|vm|vmss-[a-z]+)-(\d+)[-_]")
RULES = [
    "started-without-notice",
    "many-vms-hit",
    "agent-silent",
    "impactful-events-fleet",
    "impactful-event-scheduled",
    "delivery-trouble",
]


@dataclass
class Case:
    fleet: Fleet
    engine: Engine
    now: datetime
    #: the first moment checked (None: the fleet's start): a fleet generated with coarse old
    #: heartbeats (``FleetSpec.fine_days``) is checked where every query's range is fine
    since: datetime | None = None
    #: the cells whose incidents are followed evaluation by evaluation (None: all); alerts of the
    #: other cells seen on the way are held to being some incident's
    cells: int | None = None
    truth: fc.Truth = field(init=False)

    def __post_init__(self) -> None:
        self.truth = fc.Truth(self.fleet)

    def alerts(self, key: str, times: set[datetime]) -> list[tuple[datetime, set]]:
        """The rule's alerts at each moment (on its evaluation grid, up to now), in order."""
        rule = rules()[key]
        kept = sorted(t for t in times if t <= self.now and (self.since is None or t >= self.since))
        rows = evaluate_at(self.engine, key, kept)
        return [(t, rule.identities(rows[t])) for t in kept]

    def focus(self, name: str) -> bool:
        """A VM (plan key or name) of a followed cell."""
        if self.cells is None:
            return True
        m = _CELL.match(name)
        return m is not None and int(m.group(1)) < self.cells

    def checked(self, t: datetime) -> bool:
        """An incident or raise at ``t`` is seen whole by the evaluations (not at the start)."""
        return self.since is None or t >= self.since + 15 * MIN

    def grid(
        self, key: str, around: datetime, before: timedelta, after: timedelta
    ) -> list[datetime]:
        return moments(rules()[key], around - before, min(around + after, self.now))


def check_the_fleet_churns(case: Case) -> None:
    truth, f = case.truth, case.fleet
    fates = {v.fate for v in truth.vms.values()}
    assert {
        "scaled-out",
        "scaled-in",
        "recreated",
        "recreated-old",
        "deallocated",
        "deallocated-and-back",
        "late-after-reboot",
        "evicted",
    } <= fates
    kinds = {e.kind for e in truth.events.values()}
    assert {
        "hardware-failure-reboot",
        "hardware-failure-redeploy",
        "straggler-burst",
        "sibling-deallocated",
        "spot-eviction",
        "scale-in",
    } <= kinds
    lags = sorted(
        (fv.ts(r["_IngestionTime"]) - fv.at(r)).total_seconds()
        for r in fv.dedupe(f.records + f.heartbeats)
    )
    # 0.5 to 5 minutes (a clean stop drains its spool at once), and hours after a long reboot
    assert sum(30 <= x <= 301 for x in lags) > 0.9 * len(lags) and lags[len(lags) // 2] > 120
    assert lags[-1] > 3 * 3600
    assert len(f.records) > len(fv.dedupe(f.records))  # redeliveries
    assert {"0.1.0", "0.3.0"} <= {b["AgentVersion"] for b in f.heartbeats}  # upgrade waves
    groups = {b["ResourceGroup"] for b in f.heartbeats}
    assert {"rg-web-0", "RG-Web-0"} <= groups  # one group, two casings
    rids = defaultdict(set)
    for b in f.heartbeats:
        rids[b["VmResourceId"]].add(b["VmId"])
    assert any(len(ids) == 2 for ids in rids.values())  # recreated under the same resource id


def moments_for_views(case: Case, every: timedelta) -> list[datetime]:
    """A grid over the last two days plus moments just after the churn's events ended, those of
    the followed cells (``case.cells``; every event of the fleet is checked at each moment), from
    ``case.since`` on (before it, a fleet generated with coarse old heartbeats is not what the
    views are checked on)."""
    out = set(
        moments(rules()["agent-silent"], case.now - timedelta(days=2), case.now)[
            :: int(every / (5 * MIN))
        ]
    )
    for e in case.truth.events.values():
        if (
            e.kind
            in (
                "sibling-deallocated",
                "late-after-reboot",
                "hardware-failure-redeploy",
                "hardware-failure-reboot",
                "straggler-burst",
            )
            and e.remove is not None
            and case.focus(e.audience[0])
        ):
            out.add(min(case.now, fc.dt(e.remove) + fc.L + MIN))
    out.add(case.now)
    return sorted(t for t in out if case.since is None or t >= case.since)


# -- views --------------------------------------------------------------------------------------


def _open_view(case: Case, t: datetime, workbook_too: bool = False) -> dict[str, dict]:
    """The open events at ``t`` (library); ``workbook_too``: the workbook's item agrees."""
    rows = library(case.engine, "open-events.kql", now=t)
    if workbook_too:
        wb = workbook(case.engine, "scheduled-events/open-events.kql", now=t)
        assert {r["EventId"]: r["Status"] for r in wb} == {
            r["EventId"]: r["Status"] for r in rows
        }, t
    return {r["EventId"]: r for r in rows}


def check_open_events(case: Case, times: list[datetime]) -> None:
    decided = defaultdict(int)
    for k, t in enumerate(times):
        view = _open_view(case, t, workbook_too=k % 4 == 0)
        for eid, e in case.truth.events.items():
            want = case.truth.event_open(e, t)
            decided[want] += 1
            if want is False:
                assert eid not in view, f"{e.kind} {eid} open at {t} after it ended"
            elif want is True:
                assert eid in view, f"{e.kind} {eid} not open at {t}"
                assert (view[eid]["Status"] == "Started") == case.truth.started(e, t), (eid, t)
    assert decided[True] > 0 and decided[False] > 0


def check_now_numbers(case: Case, times: list[datetime]) -> None:
    truth = case.truth
    for t in times:
        view = _open_view(case, t)
        tiles = {
            r["Metric"]: r["Value"]
            for r in workbook(case.engine, "scheduled-events/now-tiles.kql", now=t)
        }
        want = {"Open now": 0, "Started, in progress": 0, "Upcoming impactful": 0}
        for eid, e in truth.events.items():
            is_open = truth.event_open(e, t)
            if is_open is None:  # in flight: the view's own answer
                if eid in view:
                    row = view[eid]
                    want["Open now"] += 1
                    want["Started, in progress"] += row["Status"] == "Started"
                    want["Upcoming impactful"] += (
                        row["Status"] == "Scheduled" and row["EventType"] in fc.IMPACTFUL
                    )
            elif is_open:
                started = truth.started(e, t)
                want["Open now"] += 1
                want["Started, in progress"] += started
                want["Upcoming impactful"] += (
                    not started and truth.type_at(e, fc.ms(t)) in fc.IMPACTFUL
                )
        assert {k: tiles[k] for k in want} == want, t
        _check_vm_numbers(case, t, tiles)


def _check_vm_numbers(case: Case, t: datetime, tiles: dict) -> None:
    truth = case.truth
    seen = {}
    for r in workbook(case.engine, "agent-health/fleet.kql", now=t):
        key = truth.by_vm_id[_vm_id(case, r)]
        seen[key] = "reporting" if r["Status"] in ("ok", "degraded") else r["Status"]
    health = {
        r["Metric"]: r["Value"] for r in workbook(case.engine, "agent-health/tiles.kql", now=t)
    }
    count: dict[str, int] = defaultdict(int)
    for key in truth.vms:
        if truth.settled(key, t):
            want = truth.status(key, t, timedelta(days=7))
            assert seen.get(key) == want, (key, truth.vms[key].fate, t)
        else:
            want = seen.get(key)
        if want:
            count[want] += 1
    assert (tiles["VMs covered"], tiles["Agents silent"]) == (
        count["reporting"],
        count["silent"],
    ), t
    assert (
        health["Agents reporting"],
        health["Silent"],
        health["Deleted or evicted"],
        health["Stopped cleanly"],
    ) == (count["reporting"], count["silent"], count["gone"], count["stopped"]), t


def _vm_id(case: Case, row: dict) -> str:
    """The fleet table shows no VmId: the VM whose last heartbeat is the row's."""
    index = case.__dict__.setdefault("_beat_index", {})
    if not index:
        for b in case.fleet.heartbeats:
            index[(b["VmResourceId"], fv.at(b))] = b["VmId"]
    return index[(row["VmResourceId"], row["LastHeartbeat"])]


# -- alerts -------------------------------------------------------------------------------------


def check_rule(case: Case, key: str) -> None:
    {
        "started-without-notice": _hardware,
        "many-vms-hit": _many,
        "agent-silent": _silent,
        "impactful-events-fleet": _impactful,
        "impactful-event-scheduled": _impactful,
        "delivery-trouble": _delivery,
    }[key](case, key)


def _hardware(case: Case, key: str) -> None:
    """Incident: a host failure (any type) on the VM that died; true from the arrival of its first
    record (any sibling) for 15 minutes."""
    truth, freq = case.truth, rules()[key].frequency
    first = fc.first_ingested(
        case.fleet.records,
        lambda r: (
            (r["EventId"],)
            if (
                r["Phase"] == "FirstSeen"
                and r["EventStatus"] == "Started"
                and r["UncertaintySeconds"] is not None
                and r["UncertaintySeconds"] <= 10
            )
            else None
        ),
    )
    incidents = {}
    for e in truth.events.values():
        if e.kind.startswith("hardware-failure") and (e.event_id,) in first:
            dead = truth.vms[truth.by_name[e.resources[0]][0]]
            incidents[(dead.resource_id, e.event_id, e.event_type)] = first[(e.event_id,)]
    assert {k[2] for k in incidents} == {"Reboot", "Redeploy"}  # both types page
    followed = {
        k: at
        for k, at in incidents.items()
        if at <= case.now and case.checked(at) and case.focus(truth.events[k[1]].audience[0])
    }
    times = {t for at in followed.values() for t in case.grid(key, at, 5 * MIN, 25 * MIN)}
    if case.cells is None:  # every arrival of such a record: no other alert
        times |= {t for at in first.values() for t in case.grid(key, at, 5 * MIN, 25 * MIN)}
    history = case.alerts(key, times)
    up = {k: v for k, v in fc.raised(history).items() if case.checked(v[0])}
    assert set(up) <= set(incidents), "an alert that is no host failure"
    assert set(followed) <= set(up), "a host failure that did not page"
    for k in followed:
        raises = up[k]
        assert len(raises) == 1 and timedelta(0) <= raises[0] - incidents[k] < freq, (k, raises)
    for t, now in history:
        for k in now:
            assert t - incidents[k] <= timedelta(minutes=15), (k, t)  # resolved when it ends


def _many(case: Case, key: str) -> None:
    """Incident: a burst, windows of 10 minutes with more than the threshold's VMs starting,
    chained by overlap; true when the record of the VM that takes a window over the threshold
    arrives; ends 10 minutes after its last start's record arrived."""
    truth, rule = case.truth, rules()[key]
    threshold = int(rule.threshold)
    arrived = fc.first_ingested(
        case.fleet.records,
        lambda r: (
            (r["VmId"], r["EventId"])
            if (r["Phase"] == "Started" and r["AffectsThisVm"] is True)
            else None
        ),
    )
    starts = []  # (VM key, start, arrival) from the plan; arrival from the rows
    for e in truth.events.values():
        if e.start is None or e.source == "User":
            continue
        view = view_at(e, e.start)
        if view is None or view.event_type in ("Terminate", "Preempt"):
            continue
        for name in view.resources:
            for k in truth.by_name.get(name, []):
                v = truth.vms[k]
                if v.running(e.start) and (v.vm_id, e.event_id) in arrived:
                    starts.append((k, fc.dt(e.start), arrived[(v.vm_id, e.event_id)]))
    bursts = _bursts(starts, threshold)
    assert any(len(b["vms"]) > threshold for b in bursts)
    times = set()
    for k, _, at in starts:
        if case.focus(k):
            times.update(case.grid(key, at, 5 * MIN, 15 * MIN))
    followed = [
        b
        for b in bursts
        if b["true"] <= case.now
        and case.checked(b["true"])
        and any(case.focus(k) for k in b["vms"])
    ]
    for b in followed:  # the evaluations around the moment each followed burst becomes true
        times.update(case.grid(key, b["true"], 5 * MIN, 10 * MIN))
    history = case.alerts(key, times)
    raises = [t for t in fc.raised(history).get((None,), []) if case.checked(t)]
    up_at = {t for t, now in history if now}
    for b in followed:  # up within one evaluation period of becoming true, raised at most once
        assert any(b["true"] <= t < b["true"] + rule.frequency for t in up_at), b
        # the rule has no dimensions: a raise belongs to the burst that became true last before it
        # (bursts of other cells can overlap: one alert then covers both)
        mine = [
            t
            for t in raises
            if b["true"] - rule.frequency < t <= b["last"] + rule.window
            and max((o["true"] for o in bursts if o["true"] - rule.frequency < t), default=None)
            == b["true"]
        ]
        assert len(mine) <= 1, (mine, b)
    if case.cells is None:
        assert len(raises) == len(followed), (raises, bursts)
    for t, now in history:
        if now:
            assert any(
                b["true"] <= t <= b["last"] + rule.window + rule.frequency for b in bursts
            ), t


def _bursts(starts: list, threshold: int) -> list[dict]:
    windows = []
    by_start = sorted(starts, key=lambda s: s[1])
    at = [s[1] for s in by_start]
    for _, a, _ in starts:  # the starts in [a, a + 10 min), by bisection
        inside = by_start[bisect_left(at, a) : bisect_left(at, a + 10 * MIN)]
        vms = {s[0] for s in inside}
        if len(vms) > threshold:
            firsts = sorted(min(s[2] for s in inside if s[0] == vm) for vm in vms)
            windows.append(
                {
                    "anchor": a,
                    "vms": vms,
                    "true": firsts[threshold],
                    "last": max(s[2] for s in inside),
                }
            )
    windows.sort(key=lambda w: w["anchor"])
    out: list[dict] = []
    for w in windows:
        if out and w["anchor"] - out[-1]["end_anchor"] < 10 * MIN:
            b = out[-1]
            b["vms"] |= w["vms"]
            b["true"], b["last"] = min(b["true"], w["true"]), max(b["last"], w["last"])
            b["end_anchor"] = w["anchor"]
        else:
            out.append({**w, "vms": set(w["vms"]), "end_anchor": w["anchor"]})
    return out


def _silent(case: Case, key: str) -> None:
    """Incident: an agent that stopped (a crash, a stop that lasted over an hour, a deletion with
    no Terminate, a deallocation) on a VM not gone by a Terminate, Preempt or recreation (a
    recreated VM is silent until its successor's first heartbeat arrives); true 15 minutes after
    its last heartbeat (an hour after a clean stop), ends when it reports again, is found
    recreated, or when that heartbeat is 30 minutes from leaving the 2-day range."""
    truth, rule = case.truth, rules()[key]
    beats = defaultdict(list)
    for b in fc.first_copies(case.fleet.heartbeats):
        beats[b["VmId"]].append(b)
    for rows in beats.values():
        rows.sort(key=fv.at)
    incidents, quiet, times = {}, set(), set()
    for v in truth.vms.values():
        rows = beats.get(v.vm_id, [])
        for r in v.runs:
            if r.end is None or fc.dt(r.end) > case.now:
                continue
            # the last heartbeat delivered before the agent stopped (those still in its spool
            # arrive only when it is back)
            before = [
                b
                for b in rows
                if fv.at(b) <= fc.dt(r.end) + MIN
                and fv.ts(b["_IngestionTime"]) <= fc.dt(r.end) + MIN
            ]
            if not before:
                continue
            last = before[-1]
            t_last = fv.at(last)
            after = [b for b in rows if fv.at(b) > t_last]
            ident = (v.resource_id, t_last.strftime("%Y-%m-%d %H:%M:%S"))
            since = t_last + (timedelta(hours=1) if last["Reason"] == "stop" else 15 * MIN)
            until = min(
                [fv.ts(b["_IngestionTime"]) for b in after]
                + [t_last + timedelta(days=2, minutes=-30)]
            )
            gone = _gone_in_gap(truth, v, t_last, until)
            if v.gone_how == "replaced" and not after:
                # found gone (recreated) when the new VmId's first heartbeat arrives: silent
                # until then if that is after the silence began
                found = _replacement_arrived(truth, beats, v, t_last)
                if found is not None and found <= since:
                    gone = True
                elif found is not None:
                    until = min(until, found)
            if (since < until + 10 * MIN or gone) and case.focus(v.name):
                times.update(case.grid(key, since, 5 * MIN, 10 * MIN))
                times.update(case.grid(key, until, 5 * MIN, 10 * MIN))
            if gone:
                quiet.add(ident)
            elif since < until:
                incidents[ident] = (since, until)
    history = case.alerts(key, times)
    up = {k: v for k, v in fc.raised(history).items() if case.checked(v[0])}
    every = dict(incidents)
    incidents = {k: v for k, v in incidents.items() if case.checked(v[0])}
    outage = {(v.resource_id, o) for v in truth.vms.values() for o in v.outages}
    focused = {v.resource_id for v in truth.vms.values() if case.focus(v.name)}
    for ident, raises in up.items():
        assert ident not in quiet, f"a deleted, evicted or recreated VM paged: {ident}"
        if ident in incidents and ident[0] in focused:
            since, _ = incidents[ident]
            assert len(raises) == 1 and raises[0] - since < rule.frequency, (ident, raises)
        elif ident not in every:  # silent only to the view: heartbeats held by an outage
            t_last = datetime.strptime(ident[1], "%Y-%m-%d %H:%M:%S")
            assert any(rid == ident[0] and fc.ms(t_last) <= o.end for rid, o in outage), ident
    assert any(since <= case.now for since, _ in incidents.values())
    for ident, (since, until) in incidents.items():
        if ident[0] not in focused:
            continue
        seen = [t for t, now in history if ident in now]
        assert not any(t >= until + rule.frequency for t in seen), ident  # resolved when it ends
        if since + rule.frequency <= case.now and since < until - rule.frequency:
            assert ident in up, f"no alert for {ident}"


def _replacement_arrived(
    truth: fc.Truth, beats: dict[str, list], v, t_last: datetime
) -> datetime | None:
    """When a heartbeat made after ``t_last`` by another VmId under ``v``'s resource id (any
    casing) first arrived (None: none did)."""
    rid = v.resource_id.lower()
    return min(
        (
            fv.ts(b["_IngestionTime"])
            for o in truth.vms.values()
            if o.resource_id.lower() == rid and o.vm_id != v.vm_id
            for b in beats.get(o.vm_id, [])
            if fv.at(b) > t_last
        ),
        default=None,
    )


def _gone_in_gap(truth: fc.Truth, v, t_last: datetime, until: datetime) -> bool:
    """A Terminate or Preempt for the VM was due from 30 minutes before its last heartbeat on."""
    for e in truth.events.values():
        if e.event_type in ("Terminate", "Preempt") and (v.vm_name in e.resources):
            due = truth.due(e, fc.ms(until))
            if due is not None and t_last - 30 * MIN <= fc.dt(due) <= until:
                return True
    return False


def _impactful(case: Case, key: str) -> None:
    """Incident (fleet rule): an event scheduled with an impactful type, one per EventId and type;
    per-VM rule: the same for each VM it affects and each NotBefore. True from the first
    record or heartbeat saying so; ends when it starts or goes away."""
    truth, rule = case.truth, rules()[key]
    said = fc.first_ingested(
        case.fleet.records, lambda r: (r["EventId"],) if r["EventStatus"] == "Scheduled" else None
    )
    times = set()
    events = {}
    for e in truth.events.values():
        types = {e.event_type} | {u.event_type for u in e.updates if u.event_type}
        if not types & set(fc.IMPACTFUL) or e.not_before is None:
            continue
        events[e.event_id] = e
        if not case.focus(e.audience[0]):
            continue
        end = e.start if e.start is not None else e.remove
        if (e.event_id,) in said:  # the evaluations just before and after it is said
            times.update(case.grid(key, said[(e.event_id,)], 5 * MIN, 5 * MIN))
        for u in e.updates:
            times.update(case.grid(key, fc.dt(u.at), 5 * MIN, 10 * MIN))
        if end is not None:  # the evaluations around the end showing (L after it)
            times.update(case.grid(key, fc.dt(end) + fc.L, 5 * MIN, 5 * MIN))
        lo, hi = fc.dt(e.appear), min(case.now, fc.dt(end) if end is not None else case.now)
        times.update(moments(rule, lo, hi)[36::144])  # every 12 hours while it is scheduled
    history = case.alerts(key, times)
    up = {k: v for k, v in fc.raised(history).items() if case.checked(v[0])}
    assert up, "the fleet has impactful events scheduled"
    for ident, raises in up.items():
        eid = ident[1]
        assert eid in events, ident
        e = events[eid]
        if not case.focus(e.audience[0]):
            continue
        assert len(raises) == 1, f"{key} raised {ident} {len(raises)} times: {raises}"
        assert ident[2] == truth.type_at(e, fc.ms(raises[0])) or any(
            u.event_type == ident[2] for u in e.updates
        ), ident
    for t, now in history:
        for ident in now:
            e = events[ident[1]]
            if not case.focus(e.audience[0]):
                continue
            end = e.start if e.start is not None else e.remove
            if end is not None and truth.audience_delivering(
                e, end, fc.ms(t) - int(fc.L.total_seconds() * 1000)
            ):
                assert t < fc.dt(end) + fc.L, (
                    f"{key}: {ident} still alerting at {t}, ended {fc.dt(end)}"
                )


def _failed_by(v, run, t: int) -> int:
    """Failed delivery attempts the plan's outages cost the agent run ``run`` by ``t``."""
    return sum(
        max(0, (min(t, o.end) - max(run.start, o.start)) // o.retry)
        for o in v.outages
        if o.start < t
    )


def _trouble_arrivals(case: Case) -> dict[str, list[datetime]]:
    """Per VM (resource id): when each heartbeat that carries new delivery failures first arrived.
    Which heartbeats carry them comes from the plan (outages and agent runs), not from the rows'
    counters; the rows give only each heartbeat's time and arrival."""
    truth = case.truth
    first = fc.first_ingested(case.fleet.heartbeats, lambda r: (r["RecordId"],))
    beats: dict[str, list] = defaultdict(list)
    for r in case.fleet.heartbeats:
        beats[r["VmId"]].append(r)
    out: dict[str, list[datetime]] = defaultdict(list)
    for v in truth.vms.values():
        if not v.outages:
            continue
        prev = None
        for r in sorted({b["RecordId"]: b for b in beats.get(v.vm_id, [])}.values(), key=fv.at):
            t = fc.ms(fv.at(r))
            run = next((x for x in v.runs if x.start <= t and (x.end is None or t <= x.end)), None)
            if run is None:
                continue
            failed = _failed_by(v, run, t)
            before = _failed_by(v, run, prev) if prev is not None and prev >= run.start else 0
            if failed > before:
                out[v.resource_id].append(first[(r["RecordId"],)])
            prev = t
    return out


def _delivery(case: Case, key: str) -> None:
    """Incident: a VM whose heartbeats carrying new delivery failures (the plan's outages) arrive;
    true from the first one's arrival, ends 30 minutes (the window) after the last one's, arrivals
    less than a window apart being one incident. Raised once, within an evaluation period of
    becoming true, up at every evaluation until it ends, resolved at the first one after."""
    truth, rule = case.truth, rules()[key]
    incidents: dict[tuple, list[tuple[datetime, datetime]]] = {}
    for rid, arrivals in _trouble_arrivals(case).items():
        spans: list[list[datetime]] = []
        for at in sorted(arrivals):
            if spans and at - spans[-1][1] < rule.window:
                spans[-1][1] = at
            else:
                spans.append([at, at])
        incidents[(rid,)] = [(a, b + rule.window) for a, b in spans]
    focused = {(v.resource_id,) for v in truth.vms.values() if case.focus(v.name)}
    times = set(
        moments(rule, case.since or fc.dt(truth.fleet.truth.start), case.now)[::12]
    )  # every 3 h
    for k, spans in incidents.items():
        if k in focused:
            for true, end in spans:
                times.update(case.grid(key, true, 20 * MIN, 20 * MIN))
                times.update(case.grid(key, end, 20 * MIN, 20 * MIN))
    history = case.alerts(key, times)
    assert any(true <= case.now for spans in incidents.values() for true, _ in spans), (
        "no outage in the fleet"
    )
    up = fc.raised(history)
    for t, now in history:
        for k in now:
            assert any(true <= t <= end + rule.frequency for true, end in incidents.get(k, [])), (
                f"delivery-trouble for {k} at {t}: no outage's failures arrived in the window"
            )
    for k, spans in incidents.items():
        if k not in focused:
            continue
        for true, end in spans:
            if not (case.checked(true) and true + rule.frequency <= case.now):
                continue
            mine = [r for r in up.get(k, []) if true - rule.frequency < r <= end]
            assert len(mine) == 1 and mine[0] < true + rule.frequency, (k, true, mine)
            assert all(k in now for t, now in history if true <= t <= end - MIN), (k, true, end)
            assert not any(k in now for t, now in history if t >= end + rule.frequency), (k, end)
