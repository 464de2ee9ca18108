"""The paste-able library (dashboards/queries/*.kql) executed on the fleet at the data's end, each
answer compared with the same numbers computed in Python from the same rows (helpers.fleetview),
and with the scenario's truth where it says what the answer must be."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

import pytest
from helpers import fleetview as fv
from helpers.fleetrun import library
from helpers.infra.paths import QUERIES

pytestmark = pytest.mark.e2e

DAY = timedelta(days=1)


@pytest.fixture(scope="module")
def seen(fleet, now):
    """The rows Log Analytics holds at the data's end."""
    return fv.visible(fleet.records, now), fv.visible(fleet.heartbeats, now)


def test_agents_coverage_status_per_vm(engine, seen, now, fleet):
    records, beats = seen
    rows = library(engine, "agents-coverage.kql")
    expected = fv.agent_status(records, beats, now)
    by_id = {v.vm_id: v.name for v in fleet.truth.vms.values()}
    got = {r["VmResourceId"]: r["Status"] for r in rows}
    names = {v.resource_id: v.vm_id for v in fleet.truth.vms.values()}
    assert {names[k]: s for k, s in got.items()} == expected
    # the truth: what the scenario did to these VMs is what the fleet view says
    status = {by_id[k]: s for k, s in expected.items()}
    for name, want in (
        ("vmss-spot-0_0", "silent"),
        ("vm-0-14", "silent"),
        ("vm-0-13", "silent"),
        ("vmss-app-0_19", "gone"),
        ("vmss-spot-0_2", "gone"),
        ("vm-0-11", "degraded"),
        ("vm-0-10", "degraded"),
    ):
        assert status[name] == want, name


def test_agent_delivery_sums_increases_between_heartbeats(engine, seen, now):
    _, beats = seen
    rows = library(engine, "agent-delivery.kql")
    exp: dict[tuple, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for s in fv.steps(fv.since(beats, now, DAY)):
        k = (s.row["VmName"], s.row["AgentVersion"])
        for col, name in (
            ("FailedDeliveries", "Failures"),
            ("DroppedRecords", "Dropped"),
            ("DeadLetteredRecords", "DeadLettered"),
            ("DeliveredRecords", "Delivered"),
        ):
            exp[k][name] += s.inc(col)
        exp[k]["MaxSpool"] = max(exp[k]["MaxSpool"], s.row["SpoolDepth"])
    got = {
        (r["VmName"], r["AgentVersion"]): {
            c: r[c] for c in ("Failures", "Dropped", "DeadLettered", "Delivered", "MaxSpool")
        }
        for r in rows
    }
    assert got == {k: dict(v) for k, v in exp.items()}
    assert sum(v["Dropped"] for (name, _), v in got.items() if name == "vm-0-10") > 0
    assert sum(v["Failures"] for (name, _), v in got.items() if name == "vm-0-13") > 0  # crash loop


def test_cancelled_events_are_event_level(engine, seen, now, kinds):
    records, _ = seen
    rows = library(engine, "cancelled-events.kql")
    ev = fv.events(fv.since(records, now, 30 * DAY))
    exp = {
        e.event_id: ("Canceled" if e.cancelled else "Unknown", len(e.vms_hit))
        for e in ev.values()
        if e.removed and not e.started
    }
    assert {r["EventId"]: (r["Outcome"], r["VmsHit"]) for r in rows} == exp
    assert set(kinds["cancelled"]) | set(kinds["unknown"]) == set(exp)


def test_event_drilldown_matches_the_event_id_in_any_case(engine, seen, kinds):
    records, _ = seen
    eid = kinds["updated-type"][0]
    text = (QUERIES / "event-drilldown.kql").read_text("utf-8")
    text = text.replace('"C7061BAC-AFDC-4513-B24B-AA5F13A16123"', f'"{eid.lower()}"')
    rows = engine.run(text)
    exp = fv.dedupe(r for r in records if r["EventId"] == eid)
    assert sorted((str(r["TimeGenerated"]), r["VmName"], r["Phase"]) for r in rows) == sorted(
        (str(fv.at(r)), r["VmName"], r["Phase"]) for r in exp
    )


def test_events_hitting_many_vms(engine, seen, now):
    records, _ = seen
    rows = library(engine, "events-hitting-many-vms.kql")
    ev = fv.events(fv.since(records, now, 30 * DAY))
    exp = {e.event_id: len(e.vms_hit) for e in ev.values() if len(e.vms_hit) > 1}
    assert {r["EventId"]: r["VmsHit"] for r in rows} == exp


def test_events_over_time_bins_each_event_once(engine, seen, now):
    records, _ = seen
    rows = library(engine, "events-over-time.kql")
    exp: dict[tuple, int] = defaultdict(int)
    for e in fv.events(fv.since(records, now, 30 * DAY)).values():
        exp[(e.first_seen.replace(hour=0, minute=0, second=0, microsecond=0), e.event_type)] += 1
    assert {(r["FirstSeen"], r["EventType"]): r["Events"] for r in rows} == dict(exp)
    assert sum(r["Events"] for r in rows) == len({r["EventId"] for r in records})


def test_hardware_failures_count_the_vms_named_in_resources(engine, seen, now, kinds):
    records, _ = seen
    rows = library(engine, "hardware-failures.kql")
    hits = [
        r
        for r in fv.dedupe(records)
        if r["Phase"] == "FirstSeen"
        and r["EventStatus"] == "Started"
        and r["UncertaintySeconds"] is not None
        and r["UncertaintySeconds"] <= 10
    ]
    exp: dict[str, set] = defaultdict(set)
    for r in hits:
        exp[r["EventId"]] |= {n.lstrip("_").lower() for n in r["Resources"]}
    assert {r["EventId"]: r["VmsHit"] for r in rows} == {k: len(v) for k, v in exp.items()}
    assert [r["EventId"] for r in rows] == kinds["hardware-failure"]
    assert rows[0]["VmsHit"] == 1 and rows[0]["VmNames"] == ["web-0-4"]  # reported by siblings


def _impact(records, now, span=30 * DAY, types=None) -> dict[str, tuple]:
    """Per event: (window, uncertainty, type) from the VM that measured it best."""
    recs = fv.dedupe(fv.since(records, now, span))
    per_vm: dict[tuple, dict] = defaultdict(lambda: {"w": None, "u": 0.0})
    for r in recs:
        if r["Phase"] not in ("Started", "Removed"):
            continue
        d = per_vm[(r["EventId"], r["VmId"])]
        d["u"] += r["UncertaintySeconds"] or 0.0
        if r["Phase"] == "Removed" and r["SinceStartedSeconds"] is not None:
            d["w"] = r["SinceStartedSeconds"]
    ev = fv.events(recs)
    best: dict[str, tuple] = {}
    for (eid, _), d in per_vm.items():
        if d["w"] is not None and (eid not in best or d["u"] < best[eid][1]):
            best[eid] = (d["w"], d["u"], ev[eid].event_type)
    return best


def test_impact_window_by_type_takes_the_best_measured_vm(engine, seen, now, kinds):
    records, _ = seen
    rows = library(engine, "impact-window-by-type.kql")
    best = _impact(records, now)
    by_type: dict[str, list] = defaultdict(list)
    for w, u, t in best.values():
        by_type[t].append((w, u))
    exp = {
        t: (
            len(v),
            fv.percentile([w for w, _ in v], 50),
            fv.percentile([w for w, _ in v], 90),
            max(w for w, _ in v),
        )
        for t, v in by_type.items()
    }
    assert {
        r["EventType"]: (r["Events"], r["MedianSeconds"], r["P90Seconds"], r["MaxSeconds"])
        for r in rows
    } == exp
    # the update-domain walk's first Reboot: 5 minutes, not web-2's 3-hour downtime
    assert best[kinds["ud-walk"][0]][0] == pytest.approx(300, abs=2)


def _notice(records, now, span=30 * DAY) -> dict[str, tuple[float, str]]:
    recs = [
        r
        for r in fv.dedupe(fv.since(records, now, span))
        if r["Phase"] in ("FirstSeen", "Updated") and r["NotBefore"]
    ]
    by: dict[tuple, list] = defaultdict(list)
    for r in recs:
        by[(r["EventId"], r["VmId"])].append(r)
    out: dict[str, tuple[float, str, object]] = {}
    for (eid, _), rs in by.items():
        last = max(rs, key=fv.at)
        final = fv.ts(last["NotBefore"])
        announced = min(fv.at(r) for r in rs if fv.ts(r["NotBefore"]) <= final)
        n = (final - announced).total_seconds()
        if eid not in out or n > out[eid][0]:
            out[eid] = (n, out.get(eid, (0, None, None))[1], out.get(eid, (0, None, None))[2])
        if out[eid][2] is None or fv.at(last) > out[eid][2]:
            out[eid] = (out[eid][0], last["EventType"], fv.at(last))
    return {k: (v[0], v[1]) for k, v in out.items()}


def test_notice_by_type_uses_the_notice_of_the_final_schedule(engine, seen, now, kinds):
    records, _ = seen
    rows = library(engine, "notice-by-type.kql")
    notice = _notice(records, now)
    by_type: dict[str, list] = defaultdict(list)
    for n, t in notice.values():
        by_type[t].append(n)
    exp = {
        t: (len(v), fv.kusto_round(min(v) / 60, 1), fv.kusto_round(fv.percentile(v, 50) / 60, 1))
        for t, v in by_type.items()
    }
    assert {r["EventType"]: (r["Events"], r["MinMinutes"], r["MedianMinutes"]) for r in rows} == exp
    # moved 5 minutes earlier 10 minutes after it appeared: 15 minutes of notice, not 30
    assert notice[kinds["updated-type"][0]] == (15 * 60, "Reboot")


def test_open_and_upcoming_events(engine, seen, now, kinds):
    records, beats = seen
    exp = fv.open_events(records, beats, now)
    rows = library(engine, "open-events.kql")
    assert {r["EventId"] for r in rows} == exp
    ev = fv.events(fv.since(records, now, 14 * DAY))
    up = library(engine, "upcoming-impactful.kql")
    assert {r["EventId"] for r in up} == {
        e for e in exp if ev[e].started_at is None and ev[e].event_type in fv.IMPACTFUL
    }
    # the Redeploy announced 3 days ahead is open and upcoming; nothing else is at the end
    assert {r["EventId"] for r in up} == set(kinds["announced-ahead"])


def test_start_delay_deduplicates_first(engine, seen, now):
    records, _ = seen
    rows = library(engine, "start-delay.kql")
    per: dict[str, list] = defaultdict(list)
    ev = fv.events(fv.since(records, now, 30 * DAY))
    for r in fv.dedupe(fv.since(records, now, 30 * DAY)):
        if r["Phase"] == "Started" and r["StartDelaySeconds"] is not None:
            per[r["EventId"]].append(r["StartDelaySeconds"])
    by_type: dict[str, list] = defaultdict(list)
    for eid, v in per.items():
        by_type[ev[eid].event_type].append(fv.percentile(v, 50))
    exp = {
        t: (len(v), sum(1 for x in v if x < 0), fv.percentile(v, 50)) for t, v in by_type.items()
    }
    assert {r["EventType"]: (r["Events"], r["Early"], r["MedianSeconds"]) for r in rows} == exp
    assert exp["Reboot"][1] >= 1  # the approved user reboot started early


def test_started_last_24h_state_is_the_open_definition(engine, seen, now, kinds):
    records, beats = seen
    rows = library(engine, "started-last-24h.kql")
    recs = fv.since(records, now, 2 * DAY)
    ev = fv.events(recs)
    open_now = fv.open_events(records, beats, now, lookback=2 * DAY)
    best = _impact(records, now, 2 * DAY)
    exp = {
        e.event_id: (
            "in progress" if e.event_id in open_now else "ended",
            len(e.vms_hit),
            best.get(e.event_id, (None,))[0],
        )
        for e in ev.values()
        if e.started_at and e.started_at > now - DAY
    }
    assert {r["EventId"]: (r["State"], r["VmsHit"], r["ImpactSeconds"]) for r in rows} == exp
    # the Spot VM evicted 20 hours ago is not "in progress"
    spot = [e for e in kinds["spot-eviction"] if e in exp]
    assert spot and all(exp[e][0] == "ended" for e in spot)


def test_where_events_land_counts_vms_by_their_latest_record(engine, seen, now, fleet):
    records, _ = seen
    rows = library(engine, "where-events-land.kql")
    exp: dict[tuple, tuple[set, set]] = defaultdict(lambda: (set(), set()))
    for (eid, vm), r in fv.latest(fv.since(records, now, 30 * DAY), "EventId", "VmId").items():
        if r["AffectsThisVm"] is True:
            k = (
                r["Zone"] or "(no zone)",
                r["FaultDomain"],
                r["UpdateDomain"],
                r["ScaleSetName"] or "",
            )
            exp[k][0].add(eid)
            exp[k][1].add(vm)
    assert {
        (r["Zone"], r["FaultDomain"], r["UpdateDomain"], r["ScaleSetName"]): (r["Events"], r["VMs"])
        for r in rows
    } == {k: (len(e), len(v)) for k, (e, v) in exp.items()}
