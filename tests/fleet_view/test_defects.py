"""One small dataset per wrong answer of issue 9, each asserting the right answer (all of them
failed on the queries before the fix). Numbered as in the issue."""

from __future__ import annotations

from datetime import timedelta

import pytest
from helpers import fleetview as fv
from helpers.fleetrun import evaluate, grain, library, rules, workbook
from helpers.tinyfleet import NOW, Tiny, event, vm

MIN = timedelta(minutes=1)
HOUR = timedelta(hours=1)


def identities(engine, key, t=NOW):
    return rules()[key].identities(evaluate(engine, key, t))


# -- 1. counters ----------------------------------------------------------------------------------


@pytest.mark.parametrize("g", ["5m", "1h"])
def test_1_counter_charts_keep_increases_that_cross_a_bin_edge(g):
    """12 failed deliveries, one per heartbeat interval: 12 at every grain (read 0 and 11)."""
    t, a = Tiny(), vm("a")
    start = NOW - 2 * HOUR
    for k in range(25):
        at = start + k * 5 * MIN + timedelta(seconds=7)
        failed = min(k, 12)
        t.beat(
            a,
            at,
            "start" if k == 0 else "periodic",
            uptime=(at - start).total_seconds(),
            failed=failed,
            poll_errors=failed,
        )
    e = t.engine()
    rows = workbook(e, "agent-health/delivery-trouble.kql", grain(g, days=1))
    assert sum(r["FailedDeliveries"] for r in rows) == 12
    rows = workbook(e, "agent-health/poll-errors.kql", grain(g, days=1))
    assert sum(r["PollErrors"] for r in rows) == 12


def test_1_delivery_trouble_alert_sees_failures_in_a_crash_loop():
    """Runs of 12 minutes, failures in each: the last uptime is not below the first."""
    t, a = Tiny(), vm("a")
    run = NOW - 40 * MIN
    for _ in range(3):
        t.beat(a, run, "start", uptime=0.5)
        t.beat(a, run + 6 * MIN, uptime=360.5, failed=4)
        t.beat(a, run + 11 * MIN, uptime=660.5, failed=7)
        run += 13 * MIN
    assert identities(t.engine(), "delivery-trouble") == {(a.VmResourceId,)}


def test_1_delivery_trouble_alert_does_not_fire_on_a_drained_backlog():
    """Spool 0, 300, 600, 2, 3: it grew, then drained; no failure: no alert."""
    t, a = Tiny(), vm("a")
    start = NOW - 2 * HOUR
    for k, spool in enumerate((0, 300, 600, 2, 3)):
        at = NOW - 28 * MIN + k * 5 * MIN
        t.beat(a, at, uptime=(at - start).total_seconds(), spool=spool)
    assert identities(t.engine(), "delivery-trouble") == set()
    t2 = Tiny()
    for k, spool in enumerate((0, 300, 600, 900)):
        at = NOW - 28 * MIN + k * 5 * MIN
        t2.beat(a, at, uptime=(at - start).total_seconds(), spool=spool)
    assert identities(t2.engine(), "delivery-trouble") == {(a.VmResourceId,)}  # still growing


# -- 2. silent, stopped, gone ----------------------------------------------------------------------


def _preempt(t: Tiny, who, at):
    eid = "SPOT-1"
    t.poll(
        who,
        at,
        [event(eid, "Preempt", "Scheduled", (who.VmName,), at + timedelta(seconds=30))],
        incarnation=2,
    )
    t.poll(
        who,
        at + timedelta(seconds=31),
        [event(eid, "Preempt", "Started", (who.VmName,), None)],
        incarnation=3,
    )
    return eid


def test_2_silent_alert_reports_a_spot_vm_that_came_back_and_fell_silent():
    t, s = Tiny(), vm("spot-0")
    t.beats(s, NOW - 22 * HOUR, NOW - 20 * HOUR, first="start")
    _preempt(t, s, NOW - 20 * HOUR)
    back = NOW - 18 * HOUR
    t.beats(s, back, NOW - 70 * MIN, run_start=back, first="start")
    assert {k[0] for k in identities(t.engine(), "agent-silent")} == {s.VmResourceId}
    rows = workbook(t.engine(), "agent-health/silent.kql")
    assert [r["VmName"] for r in rows] == ["spot-0"]


def test_2_silent_alert_reports_a_stop_never_followed_by_a_start():
    t, a, b = Tiny(), vm("a"), vm("b")
    t.beats(a, NOW - 5 * HOUR, NOW - 2 * HOUR, first="start")
    t.beat(a, NOW - 2 * HOUR + MIN, "stop", uptime=3 * 3600 + 60)
    t.beats(b, NOW - 5 * HOUR, NOW - 20 * MIN, first="start")
    t.beat(b, NOW - 20 * MIN + MIN, "stop", uptime=4.7 * 3600)  # a reboot under way: stopped
    e = t.engine()
    assert {k[0] for k in identities(e, "agent-silent")} == {a.VmResourceId}
    status = {r["VmName"]: r["Status"] for r in workbook(e, "agent-health/fleet.kql")}
    assert status == {"a": "silent", "b": "stopped"}


def test_2_heartbeats_spooled_through_a_silence_say_the_agent_is_back_a_redelivery_does_not():
    """vm-state's arrivedLately: a VM whose heartbeats stopped arriving 35 minutes ago, then
    arrived late (spooled) in the last 15 minutes, is reporting, not silent: its agent is back.
    One whose late heartbeats first arrived 20 minutes ago and only a second copy now is silent:
    a redelivered copy is no news; so is one whose last heartbeat, 16 minutes old, came in on time
    (2 minutes late) in the last 15 minutes: it is not one of a backlog."""
    t, back, quiet, slow = Tiny(), vm("back"), vm("quiet"), vm("slow")
    t.beats(slow, NOW - 5 * HOUR, NOW - 21 * MIN, first="start")
    t.beat(slow, NOW - 16 * MIN, uptime=5 * 3600 - 16 * 60, lag=2 * MIN)
    run = NOW - 5 * HOUR
    for who, first_arrival in ((back, NOW - 4 * MIN), (quiet, NOW - 20 * MIN)):
        t.beats(who, run, NOW - 40 * MIN, first="start")
        for made in (NOW - 35 * MIN, NOW - 30 * MIN, NOW - 25 * MIN):
            row = t.beat(who, made, uptime=(made - run).total_seconds(), lag=first_arrival - made)
        if who is quiet:
            t.redeliver(row, 17 * MIN)  # the last one again, 3 minutes ago
    e = t.engine()
    status = {r["VmName"]: r["Status"] for r in workbook(e, "agent-health/fleet.kql")}
    assert status == {"back": "ok", "quiet": "silent", "slow": "silent"}
    assert {k[0] for k in identities(e, "agent-silent")} == {quiet.VmResourceId, slow.VmResourceId}


def test_2_a_vm_stopped_cleanly_then_deleted_is_gone():
    t, a = Tiny(), vm("a")
    t.beats(a, NOW - 5 * HOUR, NOW - 3 * HOUR, first="start")
    eid = "TERM-1"
    at = NOW - 3 * HOUR + MIN
    t.poll(a, at, [event(eid, "Terminate", "Scheduled", ("a",), at + 5 * MIN)], incarnation=2)
    t.poll(a, at + 5 * MIN, [event(eid, "Terminate", "Started", ("a",), None)], incarnation=3)
    t.beat(a, at + 5 * MIN + timedelta(seconds=8), "stop", uptime=2 * 3600 + 400)
    e = t.engine()
    assert {r["VmName"]: r["Status"] for r in workbook(e, "agent-health/fleet.kql")} == {
        "a": "gone"
    }
    assert {r["VmName"]: r["Status"] for r in library(e, "agents-coverage.kql")} == {"a": "gone"}
    assert identities(e, "agent-silent") == set()


# -- 3. degraded --------------------------------------------------------------------------------


def test_3_degraded_reads_poll_errors_of_the_last_3_hours():
    """5.5 % of polls failed in the last 3 hours, 0.7 % over the agent's life: degraded."""
    t, a = Tiny(), vm("a")
    run = NOW - 24 * HOUR
    for k in range(40):
        at = NOW - 195 * MIN + k * 5 * MIN
        up = (at - run).total_seconds()
        recent = max(0, (at - (NOW - 3 * HOUR)).total_seconds())
        t.beat(a, at, uptime=up, polls=int(up), poll_errors=int(up * 0.0003 + recent * 0.055))
    last = t.heartbeats[-1]
    assert last["PollErrors"] / last["Polls"] < 0.01
    assert [r["Status"] for r in workbook(t.engine(), "agent-health/fleet.kql")] == ["degraded"]


# -- 5 and 6. impactful-event alerts ---------------------------------------------------------------


def _announced(t: Tiny, who, appear, nb, etype="Redeploy", eid="EV-1", resources=None):
    t.poll(
        who, appear, [event(eid, etype, "Scheduled", resources or (who.VmName,), nb)], incarnation=2
    )


def test_5_impactful_alerts_see_an_event_announced_3_days_ahead():
    t, a = Tiny(), vm("a")
    t.beats(a, NOW - 4 * 24 * HOUR, NOW - 3 * 24 * HOUR, first="start")
    _announced(t, a, NOW - 3 * 24 * HOUR + MIN, NOW + 4 * HOUR)
    t.beats(a, NOW - 3 * 24 * HOUR + 5 * MIN, NOW - 3 * MIN, run_start=NOW - 4 * 24 * HOUR)
    e = t.engine()
    nb = (NOW + 4 * HOUR).strftime("%Y-%m-%d %H:%M:%S")
    assert identities(e, "impactful-event-scheduled") == {(a.VmResourceId, "EV-1", "Redeploy", nb)}
    assert [r["NoticeMinutes"] for r in evaluate(e, "impactful-event-scheduled", NOW)] == [
        "47 h or more"
    ]
    assert identities(e, "impactful-events-fleet") == {(None, "EV-1", "Redeploy")}
    assert [r["NotBefore"] for r in evaluate(e, "impactful-events-fleet", NOW)] == [nb]


def test_6_an_update_that_changes_only_the_duration_does_not_re_page():
    t, a = Tiny(), vm("a")
    t.beats(a, NOW - 2 * HOUR, NOW - 90 * MIN, first="start")
    nb = NOW + HOUR
    _announced(t, a, NOW - 80 * MIN, nb, etype="Reboot")
    before = identities(t.engine(), "impactful-event-scheduled", NOW - 70 * MIN)
    t.poll(
        a,
        NOW - 60 * MIN,
        [event("EV-1", "Reboot", "Scheduled", ("a",), nb, duration=120)],
        incarnation=3,
    )
    after = identities(t.engine(), "impactful-event-scheduled", NOW - 50 * MIN)
    assert before == after and len(after) == 1


def test_6_an_update_that_removes_the_vm_from_resources_ends_its_alert():
    t, a, b = Tiny(), vm("a"), vm("b")
    nb = NOW + HOUR
    for who in (a, b):
        t.beats(who, NOW - 2 * HOUR, NOW - 90 * MIN, first="start")
        _announced(t, who, NOW - 80 * MIN, nb, etype="Reboot", resources=("a", "b"))
    for who in (a, b):
        t.poll(
            who, NOW - 30 * MIN, [event("EV-1", "Reboot", "Scheduled", ("a",), nb)], incarnation=3
        )
    assert {k[0] for k in identities(t.engine(), "impactful-event-scheduled", NOW - 20 * MIN)} == {
        a.VmResourceId
    }
    assert [
        k[0] for k in identities(t.engine(), "impactful-event-scheduled", NOW - 40 * MIN)
    ].count(b.VmResourceId) == 1


# -- 7 and 8. no-notice and many-VMs alerts --------------------------------------------------------


def _hardware_failure(t: Tiny, siblings, dead: str, at):
    rows = []
    for who in siblings:
        t.beats(who, at - HOUR, at - 2 * MIN, first="start")
        t.poll(who, at - 10 * MIN, [], incarnation=1)
        rows += t.poll(who, at, [event("HW-1", "Reboot", "Started", (dead,), None)], incarnation=2)
    return rows


def test_8_hardware_failure_alert_is_raised_on_the_vm_that_died():
    t = Tiny()
    dead, siblings = vm("web-4"), [vm("web-0"), vm("web-1")]
    t.beats(dead, NOW - 2 * HOUR, NOW - 12 * MIN, first="start")  # it never reports again
    _hardware_failure(t, siblings, "web-4", NOW - 10 * MIN)
    assert identities(t.engine(), "started-without-notice") == {
        (dead.VmResourceId, "HW-1", "Reboot")
    }


def test_7_a_redelivered_hardware_failure_record_does_not_re_page():
    t = Tiny()
    dead, siblings = vm("web-4"), [vm("web-0")]
    t.beats(dead, NOW - 6 * HOUR, NOW - 4 * HOUR, first="start")
    rows = _hardware_failure(t, siblings, "web-4", NOW - 4 * HOUR)
    for r in rows:
        t.redeliver(r, timedelta(hours=3, minutes=55))  # arrives again 5 minutes before NOW
    assert identities(t.engine(), "started-without-notice", NOW - 4 * HOUR + 5 * MIN) != set()
    assert identities(t.engine(), "started-without-notice") == set()


def _burst(t: Tiny, starts, lag_of):
    rows = {}
    for k, at in enumerate(starts):
        who = vm(f"app-{k}", scale_set="ss")
        t.poll(
            who,
            at - 15 * MIN,
            [event(f"B-{k}", "Reboot", "Scheduled", (who.VmName,), at)],
            incarnation=2,
        )
        rows[k] = t.poll(
            who,
            at,
            [event(f"B-{k}", "Reboot", "Started", (who.VmName,), None)],
            incarnation=3,
            lag=lag_of(k),
        )
    return rows


def test_7_a_burst_whose_middle_arrives_last_is_counted_whole():
    """Eight VMs start within 8 minutes; the records of the middle ones arrive last."""
    t = Tiny()
    starts = [NOW - 30 * MIN + k * MIN for k in range(8)]
    _burst(t, starts, lambda k: timedelta(minutes=2 + (12 - 3 * abs(k - 3.5))))
    got = [r["VmsHit"] for r in evaluate(t.engine(), "many-vms-hit", NOW - 5 * MIN)]
    assert got == [8]


def test_7_a_redelivered_start_does_not_re_page_many_vms_hit():
    t = Tiny()
    starts = [NOW - 5 * HOUR + k * MIN for k in range(8)]
    rows = _burst(t, starts, lambda k: timedelta(seconds=30))
    assert evaluate(t.engine(), "many-vms-hit", NOW - 5 * HOUR + 12 * MIN)[0]["VmsHit"] == 8
    t.redeliver(rows[3][0], timedelta(hours=4, minutes=50))
    assert evaluate(t.engine(), "many-vms-hit", NOW) == []


# -- 9. stale values -------------------------------------------------------------------------------


def test_9_an_event_shows_its_latest_type_and_duration():
    t, a = Tiny(), vm("a")
    t.beats(a, NOW - 2 * HOUR, NOW - 61 * MIN, first="start")
    nb = NOW + 2 * HOUR
    t.poll(
        a,
        NOW - HOUR,
        [event("EV-1", "Freeze", "Scheduled", ("a",), nb, duration=30)],
        incarnation=2,
    )
    t.poll(
        a,
        NOW - 30 * MIN,
        [event("EV-1", "Reboot", "Scheduled", ("a",), nb, duration=-1)],
        incarnation=3,
    )
    t.beats(a, NOW - 29 * MIN, NOW - 5 * MIN, run_start=NOW - 2 * HOUR)
    e = t.engine()
    for path in ("scheduled-events/open-events.kql", "scheduled-events/upcoming-impactful.kql"):
        assert [(r["EventType"], r["DurationInSeconds"]) for r in workbook(e, path)] == [
            ("Reboot", -1)
        ]
    assert [
        (r["EventType"], r["DurationInSeconds"]) for r in library(e, "upcoming-impactful.kql")
    ] == [("Reboot", -1)]


def test_9_notice_of_an_event_moved_earlier_is_the_notice_of_the_move():
    t, a = Tiny(), vm("a")
    t.poll(
        a,
        NOW - 5 * HOUR,
        [event("EV-1", "Reboot", "Scheduled", ("a",), NOW - 3 * HOUR)],
        incarnation=2,
    )
    t.poll(
        a,
        NOW - 4 * HOUR,
        [event("EV-1", "Reboot", "Scheduled", ("a",), NOW - 3 * HOUR - 40 * MIN)],
        incarnation=3,
    )
    e = t.engine()
    assert [(r["EventType"], r["MinMinutes"]) for r in library(e, "notice-by-type.kql")] == [
        ("Reboot", 20.0)
    ]
    assert [r["Minimum"] for r in workbook(e, "scheduled-events/notice-by-type.kql")] == [20.0]


def test_9_impact_window_comes_from_the_vm_that_measured_it():
    """Two siblings see a 90 s event; b's agent is down for 3 hours right after the start."""
    t, a, b = Tiny(), vm("a"), vm("b")
    start = NOW - 6 * HOUR
    for who in (a, b):
        t.poll(
            who,
            start - 20 * MIN,
            [event("EV-1", "Reboot", "Scheduled", ("a",), start)],
            incarnation=2,
        )
        t.poll(who, start, [event("EV-1", "Reboot", "Started", ("a",), None)], incarnation=3)
    t.poll(a, start + timedelta(seconds=90), [], incarnation=4)
    t.poll(b, start + 3 * HOUR, [], incarnation=4, restarted=True)
    e = t.engine()
    assert [r["MaxSeconds"] for r in library(e, "impact-window-by-type.kql")] == [90.0]
    assert [r["Maximum"] for r in workbook(e, "scheduled-events/impact-by-type.kql")] == [90.0]


def test_9_a_spot_vm_evicted_20_hours_ago_is_not_in_progress():
    t, s = Tiny(), vm("spot-0")
    t.beats(s, NOW - 22 * HOUR, NOW - 20 * HOUR, first="start")
    _preempt(t, s, NOW - 20 * HOUR)
    e = t.engine()
    assert [r["State"] for r in library(e, "started-last-24h.kql")] == ["ended"]
    assert [r["State"] for r in workbook(e, "scheduled-events/started-24h.kql")] == ["ended"]


def test_9_restarts_count_a_crash_for_stop_start_start():
    t, a = Tiny(), vm("a")
    t.beat(a, NOW - 3 * HOUR, "stop", uptime=5000)
    t.beat(a, NOW - 3 * HOUR + MIN, "start", uptime=0.5)
    t.beat(a, NOW - 3 * HOUR + 6 * MIN, uptime=300.5)
    t.beat(a, NOW - 3 * HOUR + 8 * MIN, "start", uptime=0.5)
    rows = workbook(t.engine(), "agent-health/restarts.kql")
    assert [(r["Starts"], r["CleanStops"], r["CrashesOrKills"]) for r in rows] == [(2, 1, 1)]


def test_9_agents_over_time_at_a_1_minute_grain_counts_every_agent():
    t = Tiny()
    for k in range(10):
        who = vm(f"a{k}")
        t.beats(who, NOW - HOUR + k * 30 * timedelta(seconds=1), NOW, run_start=NOW - 2 * HOUR)
    rows = workbook(
        t.engine(),
        "agent-health/agents-over-time.kql",
        {"TimeRange": fv_range(timedelta(hours=1), MIN)},
    )
    steady = [r["Agents"] for r in rows if NOW - 50 * MIN <= r["TimeGenerated"] <= NOW - 10 * MIN]
    assert steady and set(steady) == {10}


def fv_range(duration, g):
    from se_forwarder.report import TimeRange

    return TimeRange(duration, g)


def test_9_where_events_land_counts_a_vm_added_by_an_update():
    t, a, b = Tiny(), vm("a", zone="1"), vm("b", zone="2")
    nb = NOW + HOUR
    for who in (a, b):
        t.poll(
            who, NOW - 2 * HOUR, [event("EV-1", "Reboot", "Scheduled", ("a",), nb)], incarnation=2
        )
        t.poll(
            who, NOW - HOUR, [event("EV-1", "Reboot", "Scheduled", ("a", "b"), nb)], incarnation=3
        )
    e = t.engine()
    assert sorted((r["Zone"], r["VMs"]) for r in library(e, "where-events-land.kql")) == [
        ("1", 1),
        ("2", 1),
    ]
    assert sorted((r["Zone"], r["VMs"]) for r in workbook(e, "scheduled-events/by-zone.kql")) == [
        ("1", 1),
        ("2", 1),
    ]


def test_9_started_24h_vms_hit_agrees_with_its_vm_names():
    t, a, b = Tiny(), vm("a"), vm("b")
    start = NOW - 3 * HOUR
    for who in (a, b):
        t.poll(
            who,
            start - 20 * MIN,
            [event("EV-1", "Reboot", "Scheduled", ("a", "b"), start)],
            incarnation=2,
        )
    t.poll(a, start, [event("EV-1", "Reboot", "Started", ("a", "b"), None)], incarnation=3)
    rows = workbook(t.engine(), "scheduled-events/started-24h.kql")
    assert [(r["VmsHit"], r["VmNames"]) for r in rows] == [(2, "a, b")] or [
        (r["VmsHit"], r["VmNames"]) for r in rows
    ] == [(2, "b, a")]


def test_9_start_delay_deduplicates_a_record_delivered_three_times():
    t = Tiny()
    for k, late in enumerate((600, 1, 1)):
        who = vm(f"v{k}")
        nb = NOW - 5 * HOUR
        t.poll(
            who,
            nb - 20 * MIN,
            [event("EV-1", "Reboot", "Scheduled", ("v0", "v1", "v2"), nb)],
            incarnation=2,
        )
        rows = t.poll(
            who,
            nb + timedelta(seconds=late),
            [event("EV-1", "Reboot", "Started", ("v0", "v1", "v2"), None)],
            incarnation=3,
        )
        if k == 0:
            for _ in range(2):
                t.redeliver(rows[0], HOUR)
    assert [r["MedianSeconds"] for r in library(t.engine(), "start-delay.kql")] == [1.0]


def test_9_drilldown_matches_the_event_id_case_insensitively():
    t, a = Tiny(), vm("a")
    t.poll(
        a,
        NOW - HOUR,
        [event("C7061BAC-AFDC-4513-B24B-AA5F13A16123", "Freeze", "Scheduled", ("a",), NOW + HOUR)],
        incarnation=2,
    )
    rows = workbook(
        t.engine(),
        "scheduled-events/drilldown-records.kql",
        {"EventId": "c7061bac-afdc-4513-b24b-aa5f13a16123"},
    )
    assert [r["Phase"] for r in rows] == ["FirstSeen"]
    assert fv.ts(t.records[0]["TimeGenerated"]) == rows[0]["TimeGenerated"]


def test_5_an_agent_without_open_event_list_still_alerts_from_its_records():
    """Heartbeats of an agent from before OpenEventList carry none: its records decide."""
    t, a = Tiny(), vm("a")
    _announced(t, a, NOW - 3 * HOUR, NOW + HOUR, etype="Reboot")
    t.beats(a, NOW - 170 * MIN, NOW - 5 * MIN, run_start=NOW - 5 * HOUR)
    for b in t.heartbeats:
        b["OpenEventList"] = None
    assert {k[1] for k in identities(t.engine(), "impactful-event-scheduled")} == {"EV-1"}
    assert {k[1] for k in identities(t.engine(), "impactful-events-fleet")} == {"EV-1"}


def test_1_delivery_trouble_alert_pages_for_drops_of_an_outage_when_their_heartbeats_arrive():
    """A 3-hour outage of every sink: the heartbeats (drops climbing) are spooled and arrive
    together after it, with their old TimeGenerated; the alert fires when they arrive, and a
    redelivered copy of them later does not fire again."""
    t, a = Tiny(), vm("a")
    run = NOW - 5 * HOUR
    t.beat(a, run, "start", uptime=0.5)
    back = NOW - 10 * MIN  # the sinks came back ten minutes ago
    for k in range(1, 37):  # every 5 minutes through the outage, ingested when it ended
        at = run + k * 5 * MIN
        t.beat(a, at, uptime=(at - run).total_seconds(), dropped=k * 10, lag=back - at)
    assert identities(t.engine(), "delivery-trouble") == {(a.VmResourceId,)}
    assert identities(t.engine(), "delivery-trouble", NOW + HOUR) == set()  # not again later
