"""The scheduled-events workbook's Log Analytics items executed on the fleet, each with its time
context and the workbook's parameters substituted as the portal does (the time charts at grains
5m, 1h and 1d); answers compared with Python over the same rows."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

import pytest
from helpers import fleetview as fv
from helpers.fleetrun import grain, item_span, workbook

pytestmark = pytest.mark.e2e

EPOCH = datetime(1970, 1, 1)
GRAINS = ["5m", "1h", "1d"]
ALL = timedelta(days=3650)  # rows already limited to the item's time range


def binned(t: datetime, g: timedelta) -> datetime:
    return EPOCH + ((t - EPOCH) // g) * g


def rows_in(fleet, now, name, values=None):
    span = item_span("scheduled-events", name, values)
    return fv.visible(fleet.records, now, span), fv.visible(fleet.heartbeats, now, span)


def hit(records) -> dict[tuple, dict]:
    """Each VM's latest record of each event, where it says AffectsThisVm."""
    return {
        k: r for k, r in fv.latest(records, "EventId", "VmId").items() if r["AffectsThisVm"] is True
    }


@pytest.mark.parametrize(
    "path,label",
    [
        ("scheduled-events/by-zone.kql", lambda r: r["Zone"] or "(no zone)"),
        ("scheduled-events/by-fault-domain.kql", lambda r: f"FD {r['FaultDomain']}"),
        ("scheduled-events/by-update-domain.kql", lambda r: f"UD {r['UpdateDomain']}"),
    ],
)
def test_where_events_land(engine, fleet, now, path, label):
    records, _ = rows_in(fleet, now, path.split("/")[1].removesuffix(".kql"))
    exp: dict[str, tuple[set, set]] = defaultdict(lambda: (set(), set()))
    for (eid, vm), r in hit(records).items():
        exp[label(r)][0].add(eid)
        exp[label(r)][1].add(vm)
    rows = workbook(engine, path)
    column = rows[0].keys() - {"Events", "VMs"}
    assert {r[next(iter(column))]: (r["Events"], r["VMs"]) for r in rows} == {
        k: (len(e), len(v)) for k, (e, v) in exp.items()
    }


def test_by_scale_set(engine, fleet, now):
    records, _ = rows_in(fleet, now, "by-scale-set")
    started = {(r["EventId"], r["VmId"]) for r in records if r["Phase"] == "Started"}
    exp: dict[tuple, list] = defaultdict(lambda: [set(), set(), set()])
    for (eid, vm), r in hit(records).items():
        k = (r["ScaleSetName"] or "(standalone / availability set)", r["ResourceGroup"])
        exp[k][0].add(eid)
        exp[k][1].add(vm)
        if (eid, vm) in started:
            exp[k][2].add(eid)
    rows = workbook(engine, "scheduled-events/by-scale-set.kql")
    assert {
        (r["ScaleSetName"], r["ResourceGroup"]): (r["Events"], r["VMs"], r["Started"]) for r in rows
    } == {k: tuple(len(x) for x in v) for k, v in exp.items()}


@pytest.mark.parametrize("g", GRAINS)
def test_time_charts_bin_each_event_once(engine, fleet, now, g):
    values = grain(g)
    gt = values["TimeRange"].grain
    records, _ = rows_in(fleet, now, "events-by-type", values)
    exp: dict[tuple, int] = defaultdict(int)
    for e in fv.events(records).values():
        exp[(binned(e.first_seen, gt), e.event_type)] += 1
    rows = workbook(engine, "scheduled-events/events-by-type.kql", values)
    assert {(r["TimeGenerated"], r["EventType"]): r["Events"] for r in rows} == dict(exp)
    first: dict[tuple, datetime] = {}
    for r in records:
        k = (r["EventId"], r["Phase"])
        first[k] = min(first.get(k, fv.at(r)), fv.at(r))
    by_phase: dict[tuple, int] = defaultdict(int)
    for (_, phase), t in first.items():
        by_phase[(binned(t, gt), phase)] += 1
    rows = workbook(engine, "scheduled-events/events-by-phase.kql", values)
    assert {(r["TimeGenerated"], r["Phase"]): r["Events"] for r in rows} == dict(by_phase)


def test_an_event_type_selection_filters_by_the_latest_type(engine, fleet, now, kinds):
    values = {**grain("1h"), "EventType": ["Reboot"]}
    records, _ = rows_in(fleet, now, "events-by-type", values)
    exp = {e.event_id for e in fv.events(records).values() if e.event_type == "Reboot"}
    rows = workbook(engine, "scheduled-events/events-by-type.kql", values)
    assert sum(r["Events"] for r in rows) == len(exp)
    assert kinds["updated-type"][0] in exp  # a Freeze updated to a Reboot is a Reboot


def test_ended_without_start_is_event_level(engine, fleet, now, kinds):
    records, _ = rows_in(fleet, now, "ended-without-start")
    exp = {
        e.event_id: ("Canceled" if e.cancelled else "Unknown", len(e.vms_hit))
        for e in fv.events(records).values()
        if e.removed and not e.started
    }
    rows = workbook(engine, "scheduled-events/ended-without-start.kql")
    assert {r["EventId"]: (r["Outcome"], r["VmsHit"]) for r in rows} == exp
    # the first update-domain Reboot: web-2 saw it removed as Unknown... no, Completed (it saw it
    # start); a cancelled availability-set Redeploy is Canceled on all six VMs
    assert kinds["ud-walk"][0] not in exp


def test_hardware_failures_name_the_vm_that_died(engine, fleet, now, kinds):
    rows = workbook(engine, "scheduled-events/hardware-failures.kql")
    web4 = fleet.truth.vms["web-0-4"].resource_id
    assert [(r["EventId"], r["VmsHit"], r["VmNames"], r["VmResourceId"]) for r in rows] == [
        (kinds["hardware-failure"][0], 1, "web-0-4", web4)
    ]


def test_impact_notice_and_start_delay_by_type(engine, fleet, now):
    from test_library import _impact, _notice

    span = item_span("scheduled-events", "impact-by-type")
    records = fv.visible(fleet.records, now, span)
    by_type: dict[str, list] = defaultdict(list)
    for w, _, t in _impact(records, now, ALL).values():
        by_type[t].append(w)
    rows = workbook(engine, "scheduled-events/impact-by-type.kql")
    assert {r["EventType"]: (r["Events"], r["Median"], r["Maximum"]) for r in rows} == {
        t: (len(v), fv.kusto_round(fv.percentile(v, 50)), fv.kusto_round(max(v)))
        for t, v in by_type.items()
    }
    notice: dict[str, list] = defaultdict(list)
    for n, t in _notice(records, now, ALL).values():
        notice[t].append(n)
    rows = workbook(engine, "scheduled-events/notice-by-type.kql")
    assert {r["EventType"]: (r["Events"], r["Median"]) for r in rows} == {
        t: (len(v), fv.kusto_round(fv.percentile(v, 50) / 60, 1)) for t, v in notice.items()
    }
    per: dict[str, list] = defaultdict(list)
    for r in fv.dedupe(records):
        if r["Phase"] == "Started" and r["StartDelaySeconds"] is not None:
            per[r["EventId"]].append(r["StartDelaySeconds"])
    ev = fv.events(records)
    buckets: dict[tuple, int] = defaultdict(int)
    for eid, v in per.items():
        d = fv.percentile(v, 50)
        b = next(
            label
            for limit, label in (
                (-300, "1: > 5 min early (approved)"),
                (0, "2: 0-5 min early (approved)"),
                (60, "3: within 1 min"),
                (900, "4: 1-15 min late"),
                (3600, "5: 15-60 min late"),
                (float("inf"), "6: > 1 h late"),
            )
            if d < limit
        )
        buckets[(b, ev[eid].event_type)] += 1
    rows = workbook(engine, "scheduled-events/start-delay.kql")
    assert {(r["Bucket"], r["EventType"]): r["Events"] for r in rows} == dict(buckets)


def test_many_vms(engine, fleet, now):
    records, _ = rows_in(fleet, now, "many-vms")
    last = fv.latest(records, "EventId", "VmId")
    exp: dict[str, list] = defaultdict(lambda: [set(), 0])
    for (eid, vm), r in last.items():
        if r["AffectsThisVm"] is True:
            exp[eid][0].add(vm)
        exp[eid][1] = max(exp[eid][1], len(r["Resources"]))
    rows = workbook(engine, "scheduled-events/many-vms.kql")
    assert {r["EventId"]: (r["VmsHit"], r["ResourcesListed"]) for r in rows} == {
        k: (len(v[0]), v[1]) for k, v in exp.items() if len(v[0]) > 1 or v[1] > 1
    }


def test_open_upcoming_and_now_tiles(engine, fleet, now, kinds):
    records, beats = rows_in(fleet, now, "open-events")
    exp = fv.open_events(records, beats, now)
    ev = fv.events(records)
    assert {r["EventId"] for r in workbook(engine, "scheduled-events/open-events.kql")} == exp
    upcoming = {e for e in exp if ev[e].started_at is None and ev[e].event_type in fv.IMPACTFUL}
    rows = workbook(engine, "scheduled-events/upcoming-impactful.kql")
    assert {r["EventId"] for r in rows} == upcoming == set(kinds["announced-ahead"])
    assert rows[0]["Countdown"] == "in 06:00:00" and rows[0]["DurationInSeconds"] == -1
    tiles = {r["Metric"]: r["Value"] for r in workbook(engine, "scheduled-events/now-tiles.kql")}
    span = item_span("scheduled-events", "silent-agents")
    status = fv.agent_status(
        fv.visible(fleet.records, now, span),
        fv.visible(fleet.heartbeats, now, span),
        now,
        degraded=False,
    )
    assert tiles == {
        "Open now": len(exp),
        "Upcoming impactful": len(upcoming),
        "Started, in progress": sum(1 for e in exp if ev[e].started_at),
        "VMs covered": sum(1 for s in status.values() if s == "reporting"),
        "Agents silent": sum(1 for s in status.values() if s == "silent"),
    }
    silent = workbook(engine, "scheduled-events/silent-agents.kql")
    rid = {v.resource_id: v.vm_id for v in fleet.truth.vms.values()}
    assert {rid[r["VmResourceId"]] for r in silent} == {
        k for k, s in status.items() if s == "silent"
    }


def test_range_tiles(engine, fleet, now):
    records, _ = rows_in(fleet, now, "range-tiles")
    ev = fv.events(records)
    recs = fv.dedupe(records)
    tiles = {r["Metric"]: r["Value"] for r in workbook(engine, "scheduled-events/range-tiles.kql")}
    assert tiles == {
        "Events": len(ev),
        "VMs hit": len({vm for (_, vm) in hit(recs)}),
        "Started": sum(1 for e in ev.values() if e.started),
        "Canceled": sum(1 for e in ev.values() if e.removed and not e.started and e.cancelled),
        "Outcome unknown": sum(
            1 for e in ev.values() if e.removed and not e.started and not e.cancelled
        ),
        "Hardware failures": len(
            {
                r["EventId"]
                for r in recs
                if r["Phase"] == "FirstSeen"
                and r["EventStatus"] == "Started"
                and r["UncertaintySeconds"] is not None
                and r["UncertaintySeconds"] <= 10
            }
        ),
    }


def test_started_24h(engine, fleet, now):
    records, beats = rows_in(fleet, now, "started-24h")
    open_now = fv.open_events(records, beats, now, lookback=timedelta(days=2))
    ev = fv.events(records)
    exp = {
        e.event_id: ("in progress" if e.event_id in open_now else "ended", len(e.vms_hit))
        for e in ev.values()
        if e.started_at and e.started_at > now - timedelta(days=1)
    }
    rows = workbook(engine, "scheduled-events/started-24h.kql")
    assert {r["EventId"]: (r["State"], r["VmsHit"]) for r in rows} == exp
    for r in rows:  # VmsHit and VmNames agree
        assert r["VmsHit"] == len([n for n in r["VmNames"].split(", ") if n])


def test_drilldown_matches_the_event_id_in_any_case(engine, fleet, now, kinds):
    records, _ = rows_in(fleet, now, "drilldown-records")
    eid = kinds["updated-type"][0]
    rows = workbook(
        engine, "scheduled-events/drilldown-records.kql", {"EventId": f" {eid.lower()} "}
    )
    assert sorted(r["RecordId"] for r in rows) == sorted(
        r["RecordId"] for r in fv.dedupe(records) if r["EventId"] == eid
    )


def test_parameter_choices(engine, fleet, now):
    records, beats = rows_in(fleet, now, "EventType")
    assert [
        r["EventType"] for r in workbook(engine, "scheduled-events/parameters/EventType.kql")
    ] == sorted({r["EventType"] for r in records})
    both = records + beats
    assert [
        r["ResourceGroup"]
        for r in workbook(engine, "scheduled-events/parameters/ResourceGroup.kql")
    ] == sorted({r["ResourceGroup"] for r in both})
    assert [
        r["SubscriptionId"]
        for r in workbook(engine, "scheduled-events/parameters/Subscription.kql")
    ] == sorted({r["SubscriptionId"] for r in both})
    assert {r["value"] for r in workbook(engine, "scheduled-events/parameters/Zone.kql")} == {
        r["Zone"] or "" for r in both
    }
