"""The alert rules evaluated on the fleet at several moments, each with its own frequency, window
and query time range from infra/modules/alerts.bicep: at every evaluation the alerts the query
raises (resource and dimensions, as Azure groups them) are the ones computed in Python from the
rows visible at that moment; then the scenario's truth says when each must fire, and only once."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from helpers import fleetalerts as fa
from helpers import fleetview as fv
from helpers.alert_history import fired, history
from helpers.fleetrun import evaluate, moments, rules

pytestmark = pytest.mark.e2e

M5 = timedelta(minutes=5)


def ms(fleet, t: int) -> datetime:
    return fv.ts(fleet_iso(t))


def fleet_iso(t: int) -> str:
    from se_forwarder.timefmt import format_ms

    return format_ms(t)


def test_impactful_per_vm_fires_once_and_stops_for_a_vm_removed_by_an_update(engine, fleet):
    e = next(e for e in fleet.truth.events.values() if e.kind == "resources-dropped")
    hist = history(
        engine,
        fleet,
        "impactful-event-scheduled",
        ms(fleet, e.appear) - M5,
        ms(fleet, e.start) + 3 * M5,
        fa.impactful_per_vm,
    )
    ours = {k: n for k, n in fired(hist).items() if k[1] == e.event_id}
    vms = {fleet.truth.vms[n].resource_id: n for n in e.resources}
    assert {vms[k[0]] for k in ours} == set(e.resources) and set(ours.values()) == {1}
    update = ms(fleet, e.updates[0].at)
    dropped = fleet.truth.vms[e.resources[2]].resource_id
    times = moments(
        rules()["impactful-event-scheduled"], ms(fleet, e.appear) - M5, ms(fleet, e.start) + 3 * M5
    )
    alerting = [
        t
        for t, now in zip(times, hist, strict=True)
        if any(k[0] == dropped and k[1] == e.event_id for k in now)
    ]
    # the VM an Updated removed from Resources stops alerting once that record is in
    assert alerting and max(alerting) < update + M5 <= times[-1]


def test_impactful_alerts_see_an_event_announced_days_ahead(engine, fleet, now):
    e = next(e for e in fleet.truth.events.values() if e.kind == "announced-ahead")
    vm = fleet.truth.vms[e.resources[0]]
    for key, expected in (
        ("impactful-event-scheduled", fa.impactful_per_vm),
        ("impactful-events-fleet", lambda r, b, t: set(fa.impactful_fleet(r, b, t))),
    ):
        rule = rules()[key]
        for t in (
            ms(fleet, e.appear) + 2 * M5,
            now - timedelta(days=2, hours=1),
            now - timedelta(hours=1),
            now,
        ):
            got = rule.identities(evaluate(engine, key, t))
            records = fv.visible(fleet.records, t, rule.query_range)
            beats = fv.visible(fleet.heartbeats, t, rule.query_range)
            assert got == expected(records, beats, t), (key, t)
            assert any(e.event_id in k for k in got), (key, t)
    # the FirstSeen record is more than 2 days old at the end: the heartbeat carries the event
    assert (now - ms(fleet, e.appear)) > timedelta(days=2)
    rows = evaluate(engine, "impactful-event-scheduled", now)
    assert [(r["VmResourceId"], r["EventType"], r["NoticeMinutes"]) for r in rows] == [
        (vm.resource_id, "Redeploy", "47 h or more")
    ]


def test_impactful_fleet_alert_follows_updates(engine, fleet):
    e = next(e for e in fleet.truth.events.values() if e.kind == "updated-type")

    def expected(records, beats, t):
        return set(fa.impactful_fleet(records, beats, t))

    hist = history(
        engine,
        fleet,
        "impactful-events-fleet",
        ms(fleet, e.appear) - M5,
        ms(fleet, e.start) + 2 * M5,
        expected,
    )
    ours = [k for k in fired(hist) if k[1] == e.event_id]
    # a Freeze is not impactful: the alert starts with the update that made it a Reboot
    assert [k[2] for k in ours] == ["Reboot"]


def test_started_without_notice_pages_once_for_the_vm_that_died(engine, fleet):
    e = next(e for e in fleet.truth.events.values() if e.kind == "hardware-failure")
    hist = history(
        engine,
        fleet,
        "started-without-notice",
        ms(fleet, e.appear) - M5,
        ms(fleet, e.appear) + timedelta(hours=4),
        fa.started_without_notice,
    )
    assert fired(hist) == {(fleet.truth.vms["web-0-4"].resource_id, e.event_id, "Reboot"): 1}


def test_many_vms_hit_counts_the_whole_burst(engine, fleet, now):
    rule = rules()["many-vms-hit"]
    peak = 0
    for t in moments(rule, now - timedelta(minutes=70), now):
        rows = evaluate(engine, "many-vms-hit", t)
        records = fv.visible(fleet.records, t, rule.query_range)
        want = fa.many_vms_hit(records, t)
        assert (rows[0]["VmsHit"] if rows else None) == want, t
        peak = max(peak, want or 0)
    assert peak == 8 > rule.threshold  # eight VMs of the burst, counted together
