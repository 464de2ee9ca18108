"""Issue 20, services not only VMs: the fleet view grouped by service (the VM's tag named by the
workbook parameter ServiceTag, else its scale set, else its resource group;
dashboards/definitions/fleet-vms.kql), executed on generated fleets whose VMs the generator
spreads across services, and held to the generator's own plan (tests/helpers/fleetservices.py):

* upcoming by service, zone and fault domain (library and workbook, every moment the data can
  tell), also with another tag as the service;
* concurrency risk (library and workbook), and its alert on a churning fleet: one alert per
  incident, raised within one evaluation period (plus the ingestion lag) of the risk becoming
  true, resolved when it passes, nothing else raised;
* impact accounting per service and month (library and workbook): counts equal to the plan's,
  the plan's impact window inside the bounds the records give."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from helpers import fleetchurn as fc
from helpers import fleetservices as fs
from helpers.fleetrun import (
    evaluate_at,
    library,
    library_at,
    moments,
    rules,
    workbook,
    workbook_at,
)

from se_forwarder.report import Engine
from se_forwarder_testbed.fleet.model import HOUR, MINUTE

pytestmark = pytest.mark.e2e

UPCOMING = "scheduled-events/services-upcoming.kql"
RISK = "scheduled-events/services-concurrency-risk.kql"


@pytest.fixture(scope="module")
def truth(fleet):
    return fc.Truth(fleet)


#: the session fleet's rows arrive at most 45 s after they are made (FleetSpec's kind fleet)
SETTLED = 3 * MINUTE


def quiet_moments(truth: fc.Truth, busy, *, most: int = 16, rest: int = 4) -> list[int]:
    """Moments the data can tell everything the plan says (shortly after events appear, two hours
    on, shortly after they start), at most ``most`` where ``busy(t)`` (the plan has something to
    show) and ``rest`` where not, spread over the week (each moment costs seconds)."""
    out = set()
    for e in truth.events.values():
        for t in (
            e.appear + 4 * MINUTE,
            e.appear + 12 * MINUTE,
            e.appear + 2 * HOUR,
            (e.start or e.appear) + 4 * MINUTE,
        ):
            if truth.fleet.truth.start + HOUR < t < truth.fleet.truth.end and fs.quiet(
                truth, t, SETTLED
            ):
                out.add(t)
    full = [t for t in sorted(out) if busy(t)]
    empty = [t for t in sorted(out) if not busy(t)]
    return sorted(_spread(full, most) + _spread(empty, rest))


def _spread(ts: list[int], n: int) -> list[int]:
    return ts if len(ts) <= n else [ts[k * len(ts) // n] for k in range(n)]


def test_the_generator_spreads_vms_across_services(truth):
    sizes = Counter(v.service() for v in truth.vms.values() if v.runs)
    tagged = {s: n for s, n in sizes.items() if ":" not in s}
    assert set(tagged) == {"storefront", "checkout", "payments"} and min(tagged.values()) >= 6
    assert any(s.startswith("scale set: ") for s in sizes)  # no service tag: the scale set
    assert any(s.startswith("resource group: ") for s in sizes)  # neither: the resource group
    assert Counter(v.service("team") for v in truth.vms.values())["shop"] >= 26


def _upcoming_truth(truth, t, tag="service"):
    return {
        k: (len(v["events"]), len(v["vms"]), v["earliest"], round(v["seconds"] / 60, 1))
        for k, v in fs.upcoming(truth, t, tag).items()
    }


def test_upcoming_by_service_equals_the_plan(engine, truth):
    checked = nonempty = 0
    times = quiet_moments(truth, lambda t: fs.upcoming(truth, t))
    libs = library_at(engine, "services-upcoming.kql", [fc.dt(t) for t in times])
    wbs = workbook_at(engine, UPCOMING, [fc.dt(t) for t in times])
    for t in times:
        want = _upcoming_truth(truth, t)
        lib = fc.upcoming_by_service(libs[fc.dt(t)])
        wb = fc.upcoming_by_service(wbs[fc.dt(t)])
        assert lib == want, fc.dt(t)
        assert wb == want, fc.dt(t)
        checked += 1
        nonempty += bool(want)
    assert nonempty >= 12 and checked > nonempty, (checked, nonempty)


def test_the_service_tag_is_a_parameter(engine, truth):
    """ServiceTag = team: the same view grouped by another tag; VMs without it fall back."""
    seen = set()
    times = quiet_moments(
        truth, lambda t: {k[0] for k in fs.upcoming(truth, t, "team")} - {"money"}, most=6, rest=1
    )  # moments with shop (storefront, checkout) too
    wbs = workbook_at(engine, UPCOMING, [fc.dt(t) for t in times], {"ServiceTag": "team"})
    for t in times:
        want = _upcoming_truth(truth, t, "team")
        assert fc.upcoming_by_service(wbs[fc.dt(t)]) == want, fc.dt(t)
        seen |= {k[0] for k in want}
    assert {"shop", "money"} <= seen and any(s.startswith("resource group: ") for s in seen)


def _risk_rows(rows):
    return {r["Service"]: (r["VmsAtOnce"], set(r["VmNames"].split(", "))) for r in rows}


def test_concurrency_risk_equals_the_plan(engine, truth):
    checked, risky = 0, set()
    times = quiet_moments(truth, lambda t: fs.at_risk(truth, t), most=4, rest=10)
    libs = library_at(engine, "services-concurrency-risk.kql", [fc.dt(t) for t in times])
    wbs = workbook_at(engine, RISK, [fc.dt(t) for t in times])
    for t in times:
        want = {s: (len(v), v) for s, v in fs.at_risk(truth, t).items()}
        assert _risk_rows(libs[fc.dt(t)]) == want, fc.dt(t)
        assert _risk_rows(wbs[fc.dt(t)]) == want, fc.dt(t)
        checked += 1
        risky |= set(want)
    assert checked >= 12 and risky == {"checkout"}, (checked, risky)
    # the parameters change what is a risk: 2 VMs at once is a risk for storefront's UD walk
    walk = next(e for e in truth.events.values() if e.kind == "ud-walk" and len(e.resources) == 2)
    t = walk.appear + 12 * MINUTE
    assert fs.quiet(truth, t, SETTLED)
    want = {s: (len(v), v) for s, v in fs.at_risk(truth, t, vms=2).items()}
    assert "storefront" in want
    got = workbook(engine, RISK, {"RiskVms": "2"}, now=fc.dt(t))
    assert _risk_rows(got) == want
    assert "storefront" not in _risk_rows(workbook(engine, RISK, now=fc.dt(t)))


# -- the alert, on a churning fleet ----------------------------------------------------------------

KEY = "service-concurrency-risk"


@pytest.fixture(scope="module")
def churn(churn_fleet):
    fleet = churn_fleet
    now = fc.dt(fleet.truth.end)
    return fc.Truth(fleet), Engine(fleet.records, fleet.heartbeats, now=now), now


# every 5 minutes across two incidents and hourly across 3 days: about 130 evaluations of the
# rule, which reads the whole fleet model (agents, Azure's record, inventory) since issue 28
# (bench/fleet_model.py measures it beside the rule before): more than the default 300 s on a
# loaded machine
@pytest.mark.timeout(1200)
def test_one_alert_per_concurrency_incident(churn):
    truth, engine, now = churn
    rule = rules()[KEY]
    start = truth.fleet.truth.start + 2 * HOUR
    incidents = fs.risk_incidents(truth, start, truth.fleet.truth.end, vms=int(rule_k()))
    # the straggler burst and the burst of the churning cell (helpers: fleetchurn, churn.py)
    assert len(incidents) == 2 and {s for s, _, _ in incidents} == {"checkout"}
    slack = rule.frequency + fc.L
    times = set(moments(rule, fc.dt(start), now)[::12])  # every hour: nothing else raised
    for _, a, b in incidents:
        times |= set(
            moments(rule, a - 30 * timedelta(minutes=1), min(b + 30 * timedelta(minutes=1), now))
        )
    rows = evaluate_at(engine, KEY, sorted(times))
    history = [(t, rule.identities(rows[t])) for t in sorted(times)]
    raises = fc.raised(history)
    assert set(raises) <= {(None, "checkout")}, raises
    ups = raises[(None, "checkout")]
    for _, a, b in incidents:  # exactly one raise per incident, soon after it becomes true
        mine = [t for t in ups if a - rule.frequency < t <= b + slack]
        assert len(mine) == 1 and mine[0] < a + slack, (a, b, mine)
    assert len(ups) == len(incidents)
    for t, up in history:  # alerting only while an incident lasts (and its data arrives)
        if up:
            assert any(a <= t <= b + slack for _, a, b in incidents), t


def rule_k() -> int:
    """The rule's K as deployed by default (alerts.bicep's serviceRiskVms)."""
    import re

    from helpers.fleetrun import ALERTS_BICEP

    return int(re.search(r"param serviceRiskVms int = (\d+)", ALERTS_BICEP.read_text()).group(1))


def test_impact_by_service_and_month_equals_the_plan(engine, truth, now):
    """The SLA-style table: every count equal to the plan's, and the plan's impact window
    (start to removal, VM-minutes) inside the bounds the records give."""
    want = fs.impact(truth, fc.ms(now))
    rows = library(engine, "services-impact-by-month.kql")
    assert workbook(engine, "scheduled-events/services-impact-by-month.kql") == rows
    got = {(r["Service"], r["Month"]): r for r in rows}
    assert set(got) == set(want)
    assert {m for _, m in got} == {
        fs.month(truth.fleet.truth.start),
        fs.month(truth.fleet.truth.end),
    }
    for k, w in want.items():
        r = got[k]
        assert r["VMs"] == len(w["vms"]), k
        assert {t: r[t] for t in ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")} == {
            t: len(w["types"].get(t, ()))
            for t in ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")
        }, k
        assert (r["Unknown"], r["ShortNotice"], r["ApprovedEarly"]) == (
            w["unknown"],
            w["short"],
            w["early"],
        ), k
        assert r["AnnouncedMinutes"] == pytest.approx(w["announced"] / 60, abs=0.01), k
        minutes = w["window"] / 60
        assert (
            r["ImpactWindowMinMinutes"] - 0.01 <= minutes <= r["ImpactWindowMaxMinutes"] + 0.01
        ), (k, r, minutes)
    totals = {
        s: sum(r["ImpactWindowMinutes"] for (s2, _), r in got.items() if s2 == s) for s, _ in got
    }
    assert totals["checkout"] > 0 and totals["storefront"] > 0 and totals["payments"] > 0
