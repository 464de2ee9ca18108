"""Issue 28: the event views count every VM an event names, agent or not, where it is at risk.
"All events open now", "Started in the last 24h" and the tiles, library and workbook alike, on
the mixed fleet (se_forwarder_testbed.fleet.mixed: a third of the VMs without an agent, events no
agent sees at all, Spot evictions), held to the generator's truth (tests/helpers/fleetmodel.py),
never to KQL."""

from __future__ import annotations

import pytest
from helpers import fleetmodel as fm
from helpers.fleetrun import library_at, workbook, workbook_at

from se_forwarder.report import Engine
from se_forwarder_testbed.fleet.mixed import MixedSpec, generate_mixed
from se_forwarder_testbed.fleet.model import DAY, HOUR, MINUTE

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def mixed():
    fleet = generate_mixed(MixedSpec(cells=2))
    now = fm.dt(fleet.truth.end)
    return fleet, Engine(fleet.records, fleet.heartbeats, platform=fleet.platform, now=now)


def _moments(truth) -> list[int]:
    """The end (impactful events upcoming, some on VMs with no agent, one only Azure knows of);
    during an agentless VM's Reboot two days before; an hour after it; five minutes into the
    eviction of a Spot instance with no agent."""
    day = truth.end - truth.end % DAY - 2 * DAY
    return [
        truth.end,
        day + 8 * HOUR + 5 * MINUTE,
        day + 9 * HOUR,
        truth.end - 10 * HOUR + 5 * MINUTE,
    ]


def _names(text) -> set[str]:
    return set(text.split(", ")) - {""} if isinstance(text, str) else set(text)


def test_open_events_count_every_vm_an_event_names(mixed):
    fleet, engine = mixed
    truth = fleet.truth
    seen_agentless = 0
    at = [fm.dt(t) for t in _moments(truth)]
    libs = library_at(engine, "open-events.kql", at)
    wbs = workbook_at(engine, "scheduled-events/open-events.kql", at)
    for t in _moments(truth):
        want = fm.open_events(truth, t)
        seen_agentless += any(
            not truth.vms[k].agent
            for e in truth.events.values()
            if e.event_id in want
            for k in e.vms
        )
        for rows in (libs[fm.dt(t)], wbs[fm.dt(t)]):
            got = {r["EventId"]: (r["Status"], _names(r["VmNames"])) for r in rows}
            assert got == want, fm.dt(t)
            assert all(r["VmsHit"] == len(want[r["EventId"]][1]) for r in rows), fm.dt(t)
    assert seen_agentless == len(_moments(truth))


def test_started_in_the_last_day_counts_vms_without_an_agent(mixed):
    """The agentless web_3's Reboot and spot_0's eviction: no agent recorded either, Azure did."""
    fleet, engine = mixed
    truth = fleet.truth
    at = [fm.dt(t) for t in _moments(truth)]
    libs = library_at(engine, "started-last-24h.kql", at)
    wbs = workbook_at(engine, "scheduled-events/started-24h.kql", at)
    for t in _moments(truth):
        want = fm.started_within(truth, t)
        assert any(
            not truth.vms[k].agent
            for e in truth.events.values()
            if e.event_id in want
            for k in e.vms
        ), fm.dt(t)
        assert {r["EventId"]: (r["State"], r["VmsHit"]) for r in libs[fm.dt(t)]} == {
            eid: (state, len(names)) for eid, (state, names) in want.items()
        }, fm.dt(t)
        wb = wbs[fm.dt(t)]
        assert {r["EventId"]: (r["State"], _names(r["VmNames"])) for r in wb} == want, fm.dt(t)


def test_now_tiles_count_events_only_azure_knows_of(mixed):
    fleet, engine = mixed
    truth = fleet.truth
    wbs = workbook_at(engine, "scheduled-events/now-tiles.kql", [fm.dt(t) for t in _moments(truth)])
    for t in _moments(truth):
        want = fm.open_events(truth, t)
        tiles = {r["Metric"]: r["Value"] for r in wbs[fm.dt(t)]}
        upcoming = [
            eid
            for eid, (status, _) in want.items()
            if status == "Scheduled" and truth.events[eid].event_type in fm.IMPACTFUL
        ]
        assert tiles["Open now"] == len(want), fm.dt(t)
        assert tiles["Started, in progress"] == sum(s == "Started" for s, _ in want.values())
        assert tiles["Upcoming impactful"] == len(upcoming), fm.dt(t)


def test_range_tiles_count_events_and_vms_only_azure_knows_of(mixed):
    """Over the workbook's range (the whole mixed fleet's three days): every event, every VM an
    event names (agent or not), every event that started."""
    fleet, engine = mixed
    truth = fleet.truth
    tiles = {r["Metric"]: r["Value"] for r in workbook(engine, "scheduled-events/range-tiles.kql")}
    events = truth.events.values()
    assert any(all(not truth.vms[k].agent for k in e.vms) for e in events)
    assert tiles["Events"] == len(truth.events)
    assert tiles["VMs hit"] == len({k for e in events for k in e.vms})
    assert tiles["Started"] == sum(e.start is not None and e.start <= truth.end for e in events)
    assert tiles["Canceled"] == 0
