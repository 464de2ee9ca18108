"""Issue 20, exact and reproducible rows: three items whose answer hung on a tie, each on a small
dataset built to hold that tie, loaded in several row orders (the order a table's rows come in is
all that decides an unbroken tie), against the rows worked out here:

* spool's 10 worst agents: of equal depths, the first names;
* by-scale-set's event types: sorted, whatever order the records came in;
* concurrency risk (workbook, library and alert): of two moments with as many VMs at once, the
  earliest, with its VMs."""

from __future__ import annotations

import random
from datetime import timedelta

from helpers.fleetrun import evaluate, library, workbook
from helpers.tinyfleet import NOW, SUB, Tiny, event, vm

from se_forwarder.report import Engine

MIN = timedelta(minutes=1)
HOUR = timedelta(hours=1)
ORDERS = 4  # row orders each dataset is loaded in


def engines(t: Tiny) -> list[Engine]:
    """The same rows in ``ORDERS`` orders: as made, reversed, then shuffled."""
    out = []
    for k in range(ORDERS):
        records, beats = list(t.records), list(t.heartbeats)
        if k == 1:
            records.reverse()
            beats.reverse()
        elif k > 1:
            random.Random(k).shuffle(records)
            random.Random(k).shuffle(beats)
        out.append(Engine(records, beats, now=NOW))
    return out


def test_spool_worst_ten_of_equal_depths_are_the_first_names():
    t = Tiny()
    depths = {f"vm-{i:02d}": 4 for i in range(12)} | {"zz-a": 9, "zz-b": 9, "calm": 0}
    for name in reversed(depths):  # made in the reverse of name order
        t.beats(vm(name), NOW - 2 * HOUR, NOW - MIN, spool=depths[name])
    ranked = sorted((n for n, d in depths.items() if d > 0), key=lambda n: (-depths[n], n))
    want = set(ranked[:10])
    assert want == {"zz-a", "zz-b"} | {f"vm-{i:02d}" for i in range(8)}
    for engine in engines(t):
        rows = workbook(engine, "agent-health/spool.kql")
        assert {r["VmName"] for r in rows} == want
        assert all(r["SpoolDepth"] == depths[r["VmName"]] for r in rows)


def test_scale_set_event_types_come_sorted():
    t = Tiny()
    members = [vm(f"ss-{i}", scale_set="web") for i in range(3)]
    names = tuple(m.VmName for m in members)
    types = ["Reboot", "Freeze", "Redeploy", "Preempt"]
    for k, etype in enumerate(types):
        at = NOW - 5 * HOUR + k * HOUR
        for m in members:
            t.poll(
                m, at, [event(f"E{k}", etype, "Scheduled", names, at + 15 * MIN)], incarnation=k + 1
            )
            t.beats(m, at, at + 10 * MIN)
    want = ", ".join(sorted(types))
    for engine in engines(t):
        rows = [
            r
            for r in workbook(engine, "scheduled-events/by-scale-set.kql")
            if r["ScaleSetName"] == "web"
        ]
        assert len(rows) == 1 and rows[0]["Events"] == 4 and rows[0]["VMs"] == 3
        assert rows[0]["Types"] == want


def test_concurrency_risk_of_two_equal_moments_is_the_earliest():
    t = Tiny()
    members = [vm(f"web-{i}", scale_set="web") for i in range(10)]
    first, second = members[5:], members[:5]  # the earliest window's VMs have the later names
    soon, later = NOW + 2 * HOUR, NOW + 5 * HOUR
    for eid, group, nb in (("E-soon", first, soon), ("E-later", second, later)):
        names = tuple(m.VmName for m in group)
        for m in group:
            t.poll(m, NOW - 30 * MIN, [event(eid, "Reboot", "Scheduled", names, nb)], incarnation=2)
    for m in members:
        t.beats(m, NOW - HOUR, NOW - MIN)
    # each window holds its 5 VMs (half the service: a risk) for the 10 minutes a Reboot takes
    # a scale set's service is qualified by subscription and group
    want = [(f"scale set: {SUB}/rg-a/web", 5, 10, soon, ", ".join(sorted(m.VmName for m in first)))]
    for engine in engines(t):
        for rows in (
            workbook(engine, "scheduled-events/services-concurrency-risk.kql"),
            library(engine, "services-concurrency-risk.kql"),
            evaluate(engine, "service-concurrency-risk", NOW),
        ):
            got = [
                (r["Service"], r["VmsAtOnce"], r["ServiceVms"], r["At"], r["VmNames"]) for r in rows
            ]
            assert got == want
