"""The alert rules evaluated on the fleet at several moments, each with its own frequency, window
and query time range from infra/modules/alerts.bicep: at every evaluation the alerts the query
raises (resource and dimensions, as Azure groups them) are the ones computed in Python from the
rows visible at that moment; then the scenario's truth says when each must fire, and only once."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from helpers import fleetalerts as fa
from helpers import fleetview as fv
from helpers.fleetrun import evaluate, moments, rules

pytestmark = pytest.mark.e2e

M5 = timedelta(minutes=5)


def ms(fleet, t: int) -> datetime:
    return fv.ts(fleet_iso(t))


def fleet_iso(t: int) -> str:
    from se_forwarder.timefmt import format_ms

    return format_ms(t)


def history(engine, fleet, key: str, start: datetime, end: datetime, expected) -> list[set]:
    """The alerts of ``key`` at each evaluation from ``start`` to ``end`` as ``expected`` (records,
    heartbeats, moment -> identities, the rules in Python) computes them; the query is executed
    where that answer changes (the transition points), one evaluation either side, and at both
    ends, and must give the same alerts there. Returns the identities per evaluation."""
    rule = rules()[key]
    times = moments(rule, start, end)
    want = [expected(fv.visible(fleet.records, t, rule.query_range),
                     fv.visible(fleet.heartbeats, t, rule.query_range), t) for t in times]
    checked = {0, len(times) - 1}
    for i in range(1, len(times)):
        if want[i] != want[i - 1]:
            checked |= {i - 2, i - 1, i, i + 1}
    for i in sorted(k for k in checked if 0 <= k < len(times)):
        assert rule.identities(evaluate(engine, key, times[i])) == want[i], f"{key} at {times[i]}"
    return want


def fired(hist: list[set]) -> dict[tuple, int]:
    """How many times each alert started firing (absent, then present)."""
    count: dict[tuple, int] = {}
    before: set = set()
    for now in hist:
        for k in now - before:
            count[k] = count.get(k, 0) + 1
        before = now
    return count


def test_impactful_per_vm_fires_once_and_stops_for_a_vm_removed_by_an_update(engine, fleet):
    e = next(e for e in fleet.truth.events.values() if e.kind == "resources-dropped")
    hist = history(engine, fleet, "impactful-event-scheduled", ms(fleet, e.appear) - M5,
                   ms(fleet, e.start) + 3 * M5, fa.impactful_per_vm)
    ours = {k: n for k, n in fired(hist).items() if k[1] == e.event_id}
    vms = {fleet.truth.vms[n].resource_id: n for n in e.resources}
    assert {vms[k[0]] for k in ours} == set(e.resources) and set(ours.values()) == {1}
    update = ms(fleet, e.updates[0].at)
    dropped = fleet.truth.vms[e.resources[2]].resource_id
    times = moments(rules()["impactful-event-scheduled"], ms(fleet, e.appear) - M5, ms(fleet, e.start) + 3 * M5)
    alerting = [t for t, now in zip(times, hist, strict=True)
                if any(k[0] == dropped and k[1] == e.event_id for k in now)]
    # the VM an Updated removed from Resources stops alerting once that record is in
    assert alerting and max(alerting) < update + M5 <= times[-1]


def test_impactful_alerts_see_an_event_announced_days_ahead(engine, fleet, now):
    e = next(e for e in fleet.truth.events.values() if e.kind == "announced-ahead")
    vm = fleet.truth.vms[e.resources[0]]
    for key, expected in (("impactful-event-scheduled", fa.impactful_per_vm),
                          ("impactful-events-fleet", lambda r, b, t: set(fa.impactful_fleet(r, b, t)))):
        rule = rules()[key]
        for t in (ms(fleet, e.appear) + 2 * M5, now - timedelta(days=2, hours=1), now - timedelta(hours=1), now):
            got = rule.identities(evaluate(engine, key, t))
            records = fv.visible(fleet.records, t, rule.query_range)
            beats = fv.visible(fleet.heartbeats, t, rule.query_range)
            assert got == expected(records, beats, t), (key, t)
            assert any(e.event_id in k for k in got), (key, t)
    # the FirstSeen record is more than 2 days old at the end: the heartbeat carries the event
    assert (now - ms(fleet, e.appear)) > timedelta(days=2)
    rows = evaluate(engine, "impactful-event-scheduled", now)
    assert [(r["VmResourceId"], r["EventType"], r["NoticeMinutes"]) for r in rows] == [
        (vm.resource_id, "Redeploy", "47 h or more")]


def test_impactful_fleet_alert_follows_updates(engine, fleet):
    e = next(e for e in fleet.truth.events.values() if e.kind == "updated-type")

    def expected(records, beats, t):
        return set(fa.impactful_fleet(records, beats, t))

    hist = history(engine, fleet, "impactful-events-fleet", ms(fleet, e.appear) - M5,
                   ms(fleet, e.start) + 2 * M5, expected)
    ours = [k for k in fired(hist) if k[1] == e.event_id]
    # a Freeze is not impactful: the alert starts with the update that made it a Reboot
    assert [k[2] for k in ours] == ["Reboot"]


def test_started_without_notice_pages_once_for_the_vm_that_died(engine, fleet):
    e = next(e for e in fleet.truth.events.values() if e.kind == "hardware-failure")
    hist = history(engine, fleet, "started-without-notice", ms(fleet, e.appear) - M5,
                   ms(fleet, e.appear) + timedelta(hours=4), fa.started_without_notice)
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


def test_agent_silent(engine, fleet, now):
    # from just before the first of them (vm-0-14's clean stop at E - 6 h pages at E - 5 h)
    hist = history(engine, fleet, "agent-silent", now - timedelta(hours=5, minutes=10), now, fa.agent_silent)
    last = {k[0] for k in hist[-1]}
    vms = fleet.truth.vms
    assert last == {vms[n].resource_id for n in ("vmss-spot-0_0", "vm-0-14", "vm-0-13")}
    # a clean stop followed by silence is reported an hour later; the evicted-and-back Spot VM too
    firsts = {vms_by_rid(fleet)[k[0]] for k in fired(hist)}
    assert {"vm-0-14", "vmss-spot-0_0", "vm-0-13"} <= firsts


def vms_by_rid(fleet) -> dict[str, str]:
    return {v.resource_id: v.name for v in fleet.truth.vms.values()}


def test_delivery_trouble(engine, fleet, now):
    rule = rules()["delivery-trouble"]

    def expected(records, beats, t):
        return fa.delivery_trouble(fv.visible(fleet.heartbeats, t, rule.query_range), t, rule.window)

    hist = history(engine, fleet, "delivery-trouble", now - timedelta(hours=4), now, expected)
    names = vms_by_rid(fleet)
    ever = {names[k[0]] for h in hist for k in h}
    # the crash loop's failures and the slowed sink; vm-0-10's drops happened while none of its
    # heartbeats got through: they page when those heartbeats arrive, late, after the outage
    assert {"vm-0-13", "vmss-app-0_5", "vm-0-10"} <= ever
    assert "vmss-app-0_5" in {names[k[0]] for k in hist[-1]}  # still failing at the end


