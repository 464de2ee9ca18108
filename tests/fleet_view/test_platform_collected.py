"""Azure's own record as the collector keeps it (ScheduledEventsPlatform_CL) beside the agents', on
a churning fleet whose generator also emits the platform's rows, annotations and VMs with no agent
(se_forwarder_testbed.fleet.azure_record): the verified outcome per event and VM, the agentless VMs,
what was announced beside what happened, and the alert for an impactful event scheduled on a VM
no agent watches. The platform's side of every expected number is the generator's truth
(``Truth.platform``, decided from the plan before any row is made); the agents' side is what their
records say, read in Python (tests/helpers/fleetview.py)."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import timedelta

import pytest
from helpers import fleetalerts as fa
from helpers import fleetchurn as fc
from helpers import fleetview as fv
from helpers import platformtruth as pt
from helpers.fleetrun import evaluate_at, library, moments, rules, workbook

from se_forwarder.report import Engine
from se_forwarder_testbed.fleet import generate

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def case():
    fleet = generate(pt.SPEC)
    now = fc.dt(fleet.truth.end)
    return fleet, Engine(fleet.records, fleet.heartbeats, platform=fleet.platform, now=now), now


def test_the_generator_emits_azures_record(case):
    fleet, _, _ = case
    facts = fleet.truth.platform
    assert {f.status for f in facts} == {"Scheduled", "Completed", "Canceled"}
    assert {f.verdict for f in facts} == {
        "as announced",
        "other than announced",
        "failed",
        "no annotation",
    }
    assert {f.vm_name for f in facts if not f.agent} == {"solo-0-0", "solo-0-1", "solo-0-2"}
    kinds = Counter((r["RecordType"], r["EventStatus"]) for r in fleet.platform)
    assert kinds[("Annotation", None)] > 0 and kinds[("ScheduledEvent", "Canceled")] > 0
    assert len(fleet.platform) > len(
        {r["RecordId"] for r in fleet.platform}
    )  # Event Grid redelivers
    assert {r["ResourceGroup"] for r in fleet.platform} >= {"rg-web-0"}  # lower-cased, as collected


def test_verified_outcome_per_event_and_vm(case):
    fleet, engine, now = case
    want = pt.expected_checks(fleet, now)
    rows = {
        (r["EventId"], r["VmName"]): (r["PlatformStatus"], r["VerifiedOutcome"], r["Check"])
        for r in library(engine, "verified-outcomes.kql")
    }
    assert {k: rows.get(k) for k in want} == want
    checks = Counter(c for _, _, c in want.values())
    assert {"agrees", "resolved", "no agent record"} <= set(checks), checks
    unknown = {e.event_id for e in fleet.truth.events.values() if e.kind == "unknown"}
    assert unknown and {rows[k] for k in rows if k[0] in unknown} == {
        ("Canceled", "Canceled", "resolved")
    }
    hw = next(e for e in fleet.truth.events.values() if e.kind == "hardware-failure-redeploy")
    assert rows[(hw.event_id, hw.resources[0])][2] == "no agent record"  # died with its host


def test_the_workbook_summarises_verified_outcomes_per_event(case):
    fleet, engine, now = case
    per: dict[str, Counter] = defaultdict(Counter)
    for (eid, _), (_, _, check) in pt.expected_checks(fleet, now).items():
        per[eid][check] += 1
    want = {
        eid: (
            c["agrees"],
            c["resolved"],
            c["disagrees"],
            c["agent missed the end"],
            c["no agent record"],
        )
        for eid, c in per.items()
        if c["resolved"] + c["disagrees"] + c["agent missed the end"] + c["no agent record"] > 0
    }
    rows = workbook(engine, "scheduled-events/verified-outcomes.kql")
    got = {
        r["EventId"]: (
            r["Agrees"],
            r["Resolved"],
            r["Disagrees"],
            r["MissedEnd"],
            r["NoAgentRecord"],
        )
        for r in rows
    }
    assert {k: got.get(k) for k in want} == want
    assert len(rows) <= 1000


def test_vms_with_platform_events_and_no_agent(case):
    fleet, engine, now = case
    want: dict[str, list] = defaultdict(lambda: [0, 0])
    for f in fleet.truth.platform:
        if not f.agent and f.appear + 5 * 60_000 <= fc.ms(now):
            want[f.vm_name][0] += 1
            want[f.vm_name][1] += f.status == "Scheduled" and f.event_type in fc.IMPACTFUL
    for rows in (
        library(engine, "agentless-vms.kql"),
        workbook(engine, "scheduled-events/agentless-vms.kql"),
    ):
        assert {r["VmName"]: [r["Events"], r["ScheduledImpactful"]] for r in rows} == dict(want)


def test_announced_type_beside_what_the_annotation_says_happened(case):
    fleet, engine, now = case
    want = {
        (f.event_id, f.vm_name): (f.event_type, f.annotation, f.impact, f.verdict)
        for f in fleet.truth.platform
        if f.started_at is not None and pt.settled(f, now)
    }
    rows = {
        (r["EventId"], r["VmName"]): (r["Announced"], r["Happened"], r["ImpactType"], r["Verdict"])
        for r in library(engine, "announced-vs-done.kql")
    }
    assert {k: rows.get(k) for k in want} == want
    assert {"as announced", "other than announced", "failed"} <= {v[3] for v in want.values()}
    summary: Counter = Counter()
    for etype, ann, impact, verdict in rows.values():
        summary[(etype, ann or "(none)", impact or "", verdict)] += 1
    got = {
        (r["Announced"], r["Happened"], r["ImpactType"], r["Verdict"]): r["VMs"]
        for r in workbook(engine, "scheduled-events/announced-vs-done.kql")
    }
    assert got == dict(summary)


def _watched(truth: fc.Truth, f, t) -> bool | None:
    """Whether an agent watches the fact's VM at ``t`` (None: its state is changing)."""
    if not f.agent:
        return False
    states = set()
    for k in truth.by_name.get(f.vm_name, []):
        if not truth.settled(k, t):
            return None
        states.add(truth.status(k, t, timedelta(days=2)))
    return "reporting" in states


def test_alert_impactful_event_scheduled_on_a_vm_no_agent_watches(case):
    """At each evaluation: one alert per event (EventId, EventType) Azure has scheduled, impactful,
    NotBefore not an hour past, on at least one VM no agent watches that the fleet alert does not
    count (impactful-events-fleet names every VM of an event an agent reported: computed from the
    rows visible then, tests/helpers/fleetalerts.py); nothing else (a fleet-level rule: never one
    alert per VM; one alert per incident across the two rules); a VM it leaves out for that is
    named by the fleet alert's rows."""
    fleet, engine, now = case
    truth, rule = fc.Truth(fleet), rules()["impactful-event-unwatched"]
    assert rule.resource == "" and rule.dimensions == ("EventId", "EventType")
    times = set(moments(rule, now - timedelta(days=2), now)[::36])  # every 3 hours
    for f in truth.fleet.truth.platform:
        if not f.agent:
            times.update(moments(rule, fc.dt(f.appear), fc.dt(f.appear) + timedelta(minutes=15)))
    fired = 0
    times = {t for t in times if t >= now - timedelta(days=2) + timedelta(hours=1)}
    unwatched = evaluate_at(engine, "impactful-event-unwatched", sorted(times))
    fleet_rows = evaluate_at(engine, "impactful-events-fleet", sorted(times))
    for t in sorted(times):
        rows = unwatched[t]
        got = rule.identities(rows)
        seen = [
            fv.visible(table, t, rule.query_range)
            for table in (fleet.records, fleet.heartbeats, fleet.platform)
        ]
        paged = fa.impactful_fleet_rows(seen[0], seen[1], t, seen[2])  # the fleet alert's VMs
        named = {(r["EventId"], n) for r in fleet_rows[t] for n in r["VmNames"].split(", ")}
        want, unsure = set(), set()
        for f in fleet.truth.platform:
            ends = [x for x in (f.started_at, f.ended_at) if x is not None]
            edges = [f.appear, *ends]
            if f.event_type not in fc.IMPACTFUL or f.not_before is None:
                continue
            ident = (None, f.event_id, f.event_type)
            watched = _watched(truth, f, t)
            scheduled = (
                f.appear <= fc.ms(t)
                and all(x > fc.ms(t) for x in ends)
                and f.not_before > fc.ms(t - timedelta(hours=1))
            )
            if (
                watched is None
                or any(abs(fc.ms(t) - x) <= pt.SETTLED.total_seconds() * 1000 for x in edges)
                or (truth.events.get(f.event_id) is not None and truth.events[f.event_id].updates)
            ):
                unsure.add(ident)
            elif scheduled and not watched:
                if tuple(f.vm_key.split("/")) in paged.get(f.event_id, {}).get("vms", {}):
                    assert (f.event_id, f.vm_name) in named, (t, f.event_id, f.vm_name)
                else:
                    want.add(ident)
        assert want <= got <= want | unsure, t
        assert len(rows) == len({(r["EventId"], r["EventType"]) for r in rows})  # one row each
        fired += bool(want)
    assert fired > 0


def test_fleet_alert_at_each_evaluation_leaves_events_only_azure_names_to_the_unwatched_rule(case):
    """impactful-events-fleet, every 3 hours over the last 2 days and through the quarter hour
    after each of Azure's facts on a VM with no agent appears: its alerts and VmsHit are those
    computed in Python from the rows visible then (the agents' records and heartbeats, Azure's
    rows: tests/helpers/fleetalerts.py). The impactful events on the solo VMs (no agent: only
    Azure's record names them) never raise it; impactful-event-unwatched pages them, so each is
    one alert across the two rules (issue 28)."""
    fleet, engine, now = case
    rule = rules()["impactful-events-fleet"]
    times = set(moments(rule, now - timedelta(days=2), now)[::36])
    for f in fleet.truth.platform:
        if not f.agent:
            times.update(moments(rule, fc.dt(f.appear), fc.dt(f.appear) + timedelta(minutes=15)))
    with_agent = {f.event_id for f in fleet.truth.platform if f.agent}
    solo = {
        f.event_id
        for f in fleet.truth.platform
        if not f.agent and f.event_id not in with_agent and f.event_type in fc.IMPACTFUL
    }
    assert solo
    unwatched: set[str] = set()
    kept = sorted(x for x in times if x <= now)
    fleet_rows = evaluate_at(engine, "impactful-events-fleet", kept)
    unwatched_rows = evaluate_at(engine, "impactful-event-unwatched", kept)
    for t in kept:
        seen = [
            fv.visible(rows, t, rule.query_range)
            for rows in (fleet.records, fleet.heartbeats, fleet.platform)
        ]
        want = fa.impactful_fleet_rows(seen[0], seen[1], t, seen[2])
        rows = fleet_rows[t]
        got = {
            r["EventId"]: (r["EventType"], r["VmsHit"], set(r["VmNames"].split(", "))) for r in rows
        }
        assert got == {
            eid: (e["type"], len(e["vms"]), set(e["vms"].values())) for eid, e in want.items()
        }, t
        assert not set(got) & solo, t
        unwatched |= {r["EventId"] for r in unwatched_rows[t]}
    assert solo <= unwatched
