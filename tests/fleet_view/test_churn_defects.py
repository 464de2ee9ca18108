"""One small dataset per wrong answer of issue 16 (a churning fleet), numbered as in the issue.
Each failed on the queries before the fix: the expected answers are the datasets' own facts, not
the queries' (see tests/fleet_view/test_churn_fleet.py for the same properties at fleet size).
The last datasets hold the churning fleet's truth (tests/helpers/fleetchurn.py, fleetprops.py) to
the definitions where the fleet-scale lane found it wrong and the queries right."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from helpers import fleetchurn as fc
from helpers import fleetprops as fp
from helpers.alert_history import fired
from helpers.fleetrun import evaluate, evaluate_at, grain, library, moments, rules, workbook
from helpers.tinyfleet import NOW, Tiny, event, vm

from se_forwarder.model import VmIdentity
from se_forwarder_testbed.fleet import Fleet, Truth
from se_forwarder_testbed.fleet.model import EventPlan, Run, VmTruth

SEC = timedelta(seconds=1)
MIN = timedelta(minutes=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def identities(engine, key, t=NOW):
    return rules()[key].identities(evaluate(engine, key, t))


def alerts_over(engine, key, start: datetime, end: datetime) -> list[set]:
    """The rule's alerts at each of its evaluations from ``start`` to ``end``."""
    rows = evaluate_at(engine, key, moments(rules()[key], start, end))
    return [rules()[key].identities(r) for r in rows.values()]


# -- 1. a sibling's stale heartbeat keeps a finished event open ------------------------------------


def _sibling_gone(t: Tiny, s, how: str, at: datetime, uptime: float) -> None:
    if how == "deallocated":  # a clean stop, never started again
        t.beat(s, at, "stop", uptime=uptime)
    elif how == "deleted":  # scale-in with no Terminate: its last periodic heartbeat
        t.beat(s, at, uptime=uptime)
    # "silent": nothing after its periodic heartbeats


@pytest.mark.parametrize("how", ["deleted", "deallocated", "silent"])
def test_1_a_finished_event_is_not_open_when_a_sibling_that_listed_it_left(how):
    """An availability set: the Reboot for `a` is listed by both; the sibling `s` leaves while
    listing it; `a` reboots, records the end and keeps reporting."""
    t, a, s = Tiny(), vm("a", zone=None), vm("s", zone=None)
    start = NOW - 6 * HOUR
    nb, began, ended = NOW - 3 * HOUR, NOW - 3 * HOUR + 20 * SEC, NOW - 3 * HOUR + 6 * MIN
    for who in (a, s):
        t.beats(who, start, NOW - 4 * HOUR, first="start")
        t.poll(
            who,
            NOW - 4 * HOUR + MIN,
            [event("EV-1", "Reboot", "Scheduled", ("a",), nb)],
            incarnation=2,
        )
    t.beats(s, NOW - 4 * HOUR + 4 * MIN, NOW - 3 * HOUR - 30 * MIN, run_start=start)
    _sibling_gone(t, s, how, NOW - 3 * HOUR - 28 * MIN, (3 * HOUR - 28 * MIN).total_seconds() / 1)
    t.beats(a, NOW - 4 * HOUR + 4 * MIN, began - 5 * SEC, run_start=start)
    t.poll(a, began, [event("EV-1", "Reboot", "Started", ("a",), None)], incarnation=3)
    back = began + 3 * MIN
    t.poll(a, ended, [], incarnation=4, restarted=True)
    t.beats(a, back, NOW - 2 * MIN, run_start=back, first="start")
    e = t.engine()
    assert workbook(e, "scheduled-events/open-events.kql") == []
    tiles = {r["Metric"]: r["Value"] for r in workbook(e, "scheduled-events/now-tiles.kql")}
    assert tiles["Open now"] == 0 and tiles["Started, in progress"] == 0
    assert [r["State"] for r in workbook(e, "scheduled-events/started-24h.kql")] == ["ended"]
    assert library(e, "open-events.kql") == []
    assert [r["State"] for r in library(e, "started-last-24h.kql")] == ["ended"]


def test_1_a_cancelled_event_is_not_upcoming_when_a_sibling_that_listed_it_left():
    t, a, s = Tiny(), vm("a", zone=None), vm("s", zone=None)
    start = NOW - 6 * HOUR
    for who in (a, s):
        t.beats(who, start, NOW - 4 * HOUR, first="start")
        t.poll(
            who,
            NOW - 4 * HOUR + MIN,
            [event("EV-1", "Redeploy", "Scheduled", ("a",), NOW + 5 * HOUR)],
            incarnation=2,
        )
    t.beats(s, NOW - 4 * HOUR + 4 * MIN, NOW - 3 * HOUR, run_start=start)  # then deleted
    t.poll(a, NOW - 2 * HOUR, [], incarnation=3)  # cancelled: a records the removal
    t.beats(a, NOW - 4 * HOUR + 4 * MIN, NOW - 2 * MIN, run_start=start)
    e = t.engine()
    assert workbook(e, "scheduled-events/upcoming-impactful.kql") == []
    assert library(e, "upcoming-impactful.kql") == []
    assert identities(e, "impactful-events-fleet") == set()
    assert identities(e, "impactful-event-scheduled") == set()


# -- 2. gone must not depend on which rows age out first -------------------------------------------


def test_2_an_evicted_spot_vm_never_pages_as_silent_when_its_records_age_out():
    t, s = Tiny(), vm("spot-1", scale_set="spot")
    run = NOW - 2 * DAY - 3 * HOUR
    evict = NOW - 2 * DAY - 10 * MIN
    t.beats(s, run, evict - MIN, first="start")
    t.poll(
        s,
        evict,
        [event("P-1", "Preempt", "Scheduled", ("spot-1",), evict + 30 * SEC)],
        incarnation=2,
    )
    t.poll(
        s, evict + 30 * SEC, [event("P-1", "Preempt", "Started", ("spot-1",), None)], incarnation=3
    )
    t.beat(s, evict + 40 * SEC, "stop", uptime=(evict + 40 * SEC - run).total_seconds())
    e = t.engine()
    # every second around the moment the records leave the 2-day range before the heartbeat does
    for k in range(-30, 31, 5):
        at = evict + 2 * DAY + 35 * SEC + k * SEC
        assert identities(e, "agent-silent", at) == set(), at
    for at in (evict + 20 * MIN, evict + 2 * HOUR, evict + DAY, evict + 2 * DAY - 40 * MIN):
        assert identities(e, "agent-silent", at) == set(), at


# -- 3. a sibling's late record re-pages a hardware failure ----------------------------------------


def _hardware_failure(t: Tiny, dead, siblings, at: datetime, lags, etype="Reboot"):
    for who, lag in zip(siblings, lags, strict=True):
        t.poll(who, at - 2 * SEC, [], incarnation=1)
        t.poll(
            who, at, [event("HW-1", etype, "Started", (dead.VmName,), None)], incarnation=2, lag=lag
        )


def test_3_started_without_notice_pages_once_when_a_siblings_record_arrives_later():
    t = Tiny()
    a, b, c = (vm(n, zone=None) for n in ("a", "b", "c"))
    for who in (a, b, c):
        t.beats(who, NOW - 4 * HOUR, NOW - 2 * HOUR, first="start")
    at = NOW - 2 * HOUR + MIN
    _hardware_failure(t, a, (b, c), at, (MIN, 40 * MIN))  # c delivers after its own reboot
    hist = alerts_over(t.engine(), "started-without-notice", at - 10 * MIN, at + 2 * HOUR)
    assert fired(hist) == {(a.VmResourceId, "HW-1", "Reboot"): 1}


# -- 4. and 9. many VMs hit ------------------------------------------------------------------------


def _starts(t: Tiny, starts: list[datetime], lag_of) -> None:
    for k, at in enumerate(starts):
        who = vm(f"app-{k}", scale_set="ss")
        t.poll(
            who,
            at - 15 * MIN,
            [event(f"B-{k}", "Reboot", "Scheduled", (who.VmName,), at)],
            incarnation=2,
        )
        t.poll(
            who,
            at,
            [event(f"B-{k}", "Reboot", "Started", (who.VmName,), None)],
            incarnation=3,
            lag=lag_of(k),
        )


def test_4_many_vms_hit_pages_once_when_a_straggler_arrives_35_minutes_late():
    t = Tiny()
    starts = [NOW - 2 * HOUR + k * MIN for k in range(7)]
    _starts(t, starts, lambda k: 35 * MIN if k == 3 else MIN)
    hist = alerts_over(t.engine(), "many-vms-hit", NOW - 2 * HOUR - 10 * MIN, NOW)
    assert fired(hist) == {(None,): 1}


def test_9_many_vms_hit_counts_any_ten_minutes_not_clock_minutes():
    """Six VMs start within 9 min 2 s, from 58 s into one minute to the start of the tenth after."""
    t = Tiny()
    first = NOW - HOUR + 58 * SEC
    starts = [first + k * (9 * MIN + 2 * SEC) / 5 for k in range(6)]
    _starts(t, starts, lambda k: 30 * SEC)
    got = [r["VmsHit"] for r in evaluate(t.engine(), "many-vms-hit", starts[-1] + 2 * MIN)]
    assert got == [6]


# -- 5. and 6. the impactful-event alerts ----------------------------------------------------------


def test_5_fleet_alert_reports_the_latest_not_before_and_does_not_re_page_on_a_reschedule():
    t, a, b = Tiny(), vm("a", zone=None), vm("b", zone=None)
    run = NOW - 6 * HOUR
    first_nb, moved_nb = NOW + 2 * HOUR, NOW + 5 * HOUR
    for who in (a, b):
        t.beats(who, run, NOW - 3 * HOUR, first="start")
        t.poll(
            who,
            NOW - 3 * HOUR + MIN,
            [event("EV-1", "Reboot", "Scheduled", ("a", "b"), first_nb)],
            incarnation=2,
        )
    t.beats(b, NOW - 3 * HOUR + 4 * MIN, NOW - 2 * HOUR, run_start=run)  # then its agent is silent
    t.poll(
        a, NOW - HOUR, [event("EV-1", "Reboot", "Scheduled", ("a", "b"), moved_nb)], incarnation=3
    )
    t.beats(a, NOW - 3 * HOUR + 4 * MIN, NOW - 2 * MIN, run_start=run)
    e = t.engine()
    hist = alerts_over(e, "impactful-events-fleet", NOW - 3 * HOUR, NOW)
    assert fired(hist) == {(None, "EV-1", "Reboot"): 1} and hist[-1]
    assert [r["NotBefore"] for r in evaluate(e, "impactful-events-fleet", NOW)] == [
        moved_nb.strftime("%Y-%m-%d %H:%M:%S")
    ]


def test_6_per_vm_alert_is_one_when_the_heartbeat_arrives_before_the_first_seen_record():
    t, a = Tiny(), vm("a")
    run = NOW - 3 * HOUR
    t.beats(a, run, NOW - 2 * HOUR, first="start")
    appear = NOW - 2 * HOUR + 2 * MIN
    t.poll(
        a,
        appear,
        [event("EV-1", "Reboot", "Scheduled", ("a",), appear + HOUR)],
        incarnation=2,
        lag=12 * MIN,
    )  # the spool was slow; the next heartbeat got through first
    t.beats(a, NOW - 2 * HOUR + 5 * MIN, NOW - 2 * MIN, run_start=run)
    hist = alerts_over(t.engine(), "impactful-event-scheduled", appear - 5 * MIN, appear + 50 * MIN)
    assert list(fired(hist).values()) == [1]


# -- 7. resource-group casing ----------------------------------------------------------------------


def test_7_names_map_to_vms_whatever_the_resource_group_casing():
    t = Tiny()
    a = vm("a", zone=None, rg="rg-web")
    b = vm("b", zone=None, rg="RG-Web")  # Azure gave this VM its group in another casing
    for who in (a, b):
        t.beats(who, NOW - 4 * HOUR, NOW - 2 * HOUR, first="start")
    at = NOW - 2 * HOUR + MIN
    _hardware_failure(t, a, (b,), at, (MIN,))
    e = t.engine()
    assert identities(e, "started-without-notice", at + 5 * MIN) == {
        (a.VmResourceId, "HW-1", "Reboot")
    }
    rows = workbook(e, "scheduled-events/hardware-failures.kql")
    assert [(r["EventId"], r["VmResourceId"]) for r in rows] == [("HW-1", a.VmResourceId)]


def test_hardware_failures_are_type_agnostic():
    """A host failure arriving as a Redeploy already Started is the same page and the same row."""
    t, a, b = Tiny(), vm("a", zone=None), vm("b", zone=None)
    for who in (a, b):
        t.beats(who, NOW - 4 * HOUR, NOW - 2 * HOUR, first="start")
    at = NOW - 2 * HOUR + MIN
    _hardware_failure(t, a, (b,), at, (MIN,), etype="Redeploy")
    e = t.engine()
    assert identities(e, "started-without-notice", at + 5 * MIN) == {
        (a.VmResourceId, "HW-1", "Redeploy")
    }
    assert [r["EventType"] for r in workbook(e, "scheduled-events/hardware-failures.kql")] == [
        "Redeploy"
    ]
    assert [r["VmsHit"] for r in library(e, "hardware-failures.kql")] == [1]
    assert [r["Notice"] for r in workbook(e, "scheduled-events/started-24h.kql")] == [
        "none (hardware failure)"
    ]


# -- 8. agents over time ---------------------------------------------------------------------------


@pytest.mark.parametrize("g", ["1m", "1h"])
def test_8_agents_over_time_counts_every_agent_in_every_bin_and_nothing_after_now(g):
    """Three agents report every 5 minutes throughout: 3 in every bin, no bin from now on."""
    t = Tiny()
    for k in range(3):
        a = vm(f"a{k}")
        t.beats(a, NOW - DAY - HOUR + (k + 2) * MIN, NOW - 5 * MIN + (k + 2) * MIN, first="start")
    rows = workbook(t.engine(), "agent-health/agents-over-time.kql", grain(g, days=1))
    assert rows and {r["Agents"] for r in rows} == {3}
    assert max(r["TimeGenerated"] for r in rows) < NOW


# -- 10. a type change and the EventType filter ----------------------------------------------------


def test_10_events_by_phase_keeps_the_phases_before_a_type_change():
    t, a = Tiny(), vm("a")
    t.beats(a, NOW - 5 * HOUR, NOW - 2 * MIN, first="start")
    nb = NOW - 3 * HOUR
    t.poll(
        a,
        NOW - 4 * HOUR,
        [event("EV-1", "Freeze", "Scheduled", ("a",), nb, duration=5)],
        incarnation=2,
    )
    t.poll(
        a,
        NOW - 3 * HOUR - 30 * MIN,
        [event("EV-1", "Reboot", "Scheduled", ("a",), nb)],
        incarnation=3,
    )
    t.poll(a, nb + 10 * SEC, [event("EV-1", "Reboot", "Started", ("a",), None)], incarnation=4)
    t.poll(a, nb + 5 * MIN, [], incarnation=5, restarted=True)
    rows = workbook(
        t.engine(),
        "scheduled-events/events-by-phase.kql",
        {**grain("1h", days=1), "EventType": ["Reboot"]},
    )
    assert sorted(r["Phase"] for r in rows) == ["FirstSeen", "Removed", "Started", "Updated"]


# -- 11. an unknown uncertainty is not zero --------------------------------------------------------


def test_11_the_impact_window_comes_from_a_vm_that_measured_it():
    """`b` saw the whole event (window 300 s, uncertainty 1 s + 1 s); `a`'s agent started during
    it: its first poll found it Started (uncertainty unknown), its window reads 240 s."""
    t, a, b = Tiny(), vm("a", zone=None), vm("b", zone=None)
    began = NOW - 2 * HOUR
    t.beats(b, NOW - 4 * HOUR, NOW - 2 * MIN, first="start")
    t.poll(
        b,
        began - 20 * MIN,
        [event("EV-1", "Reboot", "Scheduled", ("a", "b"), began)],
        incarnation=2,
    )
    t.poll(b, began, [event("EV-1", "Reboot", "Started", ("a", "b"), None)], incarnation=3)
    t.poll(a, began + MIN, [event("EV-1", "Reboot", "Started", ("a", "b"), None)], incarnation=3)
    for who in (a, b):
        t.poll(who, began + 5 * MIN, [], incarnation=4)
    t.beats(a, began + MIN, NOW - 2 * MIN, first="start")
    e = t.engine()
    assert [r["ImpactSeconds"] for r in workbook(e, "scheduled-events/started-24h.kql")] == [300]
    assert [r["ImpactSeconds"] for r in library(e, "started-last-24h.kql")] == [300]
    assert [r["Median"] for r in workbook(e, "scheduled-events/impact-by-type.kql")] == [300]
    assert [r["MedianSeconds"] for r in library(e, "impact-window-by-type.kql")] == [300]


# -- the truth the churning fleet's properties are held to (found by the fleet-scale lane) ---------


def _case(
    t: Tiny,
    plan: list[tuple[VmIdentity, datetime, datetime | None, str]],
    events: tuple[EventPlan, ...] = (),
    key: dict[str, str] | None = None,
    how: str | None = "no-notice",
) -> fp.Case:
    """The dataset with the plan it follows: per VM, its one agent run (start, end: None, still
    running) and its fate; a VM whose agent stopped went ``how`` (``key``: plan keys by VmId,
    default the VM's name)."""
    vms = {
        (key or {}).get(who.VmId, who.VmName): VmTruth(
            who.VmName,
            who.VmId,
            who.VmResourceId,
            fate,
            [Run(fc.ms(start), None if end is None else fc.ms(end), clean=False)],
            gone_at=None if end is None or how is None else fc.ms(end),
            gone_how=None if end is None else how,
            vm_name=who.VmName,
        )
        for who, start, end, fate in plan
    }
    truth = Truth(fc.ms(NOW - 8 * DAY), fc.ms(NOW), {e.event_id: e for e in events}, vms)
    return fp.Case(Fleet(t.records, t.heartbeats, truth), t.engine(), NOW)


def test_truth_a_vm_whose_last_hourly_heartbeat_meets_the_7_day_edge_is_out_of_view():
    """Old heartbeats come hourly (``FleetSpec.fine_days``): `a`'s agent stopped 50 minutes after
    the start of the 7-day agent-health view, its last heartbeat 20 minutes after it: out of view
    (its last heartbeat is within 30 minutes of the start, dashboards/README.md rule 6); `b`'s
    last heartbeat, 40 minutes after it, is silent. The truth took the stop for the heartbeat."""
    t, a, b, c = Tiny(), vm("a"), vm("b"), vm("c")
    edge = NOW - 7 * DAY
    t.beats(a, edge - 5 * HOUR + 20 * MIN, edge + 20 * MIN, every=HOUR, first="start")
    t.beats(b, edge - 5 * HOUR + 40 * MIN, edge + 40 * MIN, every=HOUR, first="start")
    t.beats(c, NOW - DAY, NOW - 2 * MIN, first="start")
    case = _case(
        t,
        [
            (a, edge - 5 * HOUR + 20 * MIN, edge + 50 * MIN, "scaled-in"),
            (b, edge - 5 * HOUR + 40 * MIN, edge + 70 * MIN, "scaled-in"),
            (c, NOW - DAY, None, "reporting"),
        ],
    )
    assert [case.truth.status(k, NOW, 7 * DAY) for k in "abc"] == [None, "silent", "reporting"]
    fp.check_now_numbers(case, [NOW])  # and the views say the same


def test_truth_a_redelivered_last_heartbeat_arrived_with_its_first_copy():
    """`a` was scaled in with no notice 3 minutes after its last heartbeat, which arrived at once;
    a copy of it arrived again 90 minutes later (at-least-once). `agent-silent` pages once, for
    that heartbeat, 15 minutes after it: the truth read the copy's arrival and held the previous
    heartbeat to be the last one delivered before the agent stopped."""
    t, a = Tiny(), vm("a")
    start, end = NOW - 20 * HOUR, NOW - 6 * HOUR
    t.beats(a, start, end - 3 * MIN, first="start")
    t.redeliver(t.heartbeats[-1], 90 * MIN)
    case = _case(t, [(a, start, end, "scaled-in")])
    fp.check_rule(case, "agent-silent")
    last = (a.VmResourceId, (end - 5 * MIN).strftime("%Y-%m-%d %H:%M:%S"))
    assert identities(case.engine, "agent-silent", end + 15 * MIN) == {last}


def test_truth_an_evicted_spot_vm_is_gone_until_it_comes_back():
    """`a`'s Preempt started 2 hours ago and its last heartbeat came 5 seconds later: gone now
    (rule 6), though the VM comes back after the data's end; the truth said silent."""
    t, a = Tiny(), vm("a", scale_set="vmss-spot")
    start, nb = NOW - 6 * HOUR, NOW - 2 * HOUR
    t.beats(a, start, nb - 5 * MIN, first="start")
    t.poll(a, nb - 30 * SEC, [event("EV-1", "Preempt", "Scheduled", ("a",), nb)], incarnation=2)
    t.poll(a, nb + 10 * SEC, [event("EV-1", "Preempt", "Started", ("a",), None)], incarnation=3)
    t.beat(a, nb + 15 * SEC, "stop", uptime=(nb + 15 * SEC - start).total_seconds())
    preempt = EventPlan(
        "EV-1",
        "Preempt",
        ("a",),
        ("a",),
        fc.ms(nb - 30 * SEC),
        fc.ms(nb),
        fc.ms(nb + 10 * SEC),
        None,
        kind="spot-eviction",
    )
    case = _case(t, [(a, start, nb + 15 * SEC, "evicted-and-back")], (preempt,), how=None)
    assert case.truth.status("a", NOW, 7 * DAY) == "gone"
    fp.check_now_numbers(case, [NOW])  # and the views say the same


def test_truth_a_recreated_vm_is_silent_until_its_successor_reports():
    """`a` was deleted 3 minutes after its last heartbeat and recreated under the same resource
    id with a new VmId, whose first heartbeat arrived 25 minutes after that heartbeat: silent in
    between (one page, resolved when the new VM reports); the truth held it quiet throughout."""
    t, a = Tiny(), vm("a")
    a2 = replace(a, VmId="0f0f0f0f-0000-4000-8000-000000000002")
    start, last = NOW - 20 * HOUR, NOW - 6 * HOUR
    t.beats(a, start, last, first="start")
    t.beats(a2, last + 25 * MIN, NOW - 2 * MIN, first="start")
    case = _case(
        t,
        [(a, start, last + 3 * MIN, "recreated-old"), (a2, last + 25 * MIN, None, "recreated")],
        key={a2.VmId: "a~2"},
        how="replaced",
    )
    fp.check_rule(case, "agent-silent")
    page = {(a.VmResourceId, last.strftime("%Y-%m-%d %H:%M:%S"))}
    assert [identities(case.engine, "agent-silent", last + m * MIN) for m in (20, 30)] == [
        page,
        set(),
    ]
