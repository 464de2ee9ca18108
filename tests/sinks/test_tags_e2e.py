"""The VM's chosen tags reach Log Analytics and Event Hubs under the contract (column ``Tags`` of
records and heartbeats, docs/record-contract.md §7): the agent in this process reads them from
the simulator's instance document and delivers through the real SDKs to both stand-ins, which
check every row against contract.json's columns. A tag nobody chose never leaves the VM."""

from __future__ import annotations

import json

import pytest
from helpers.agentrun import AgentRun
from helpers.azure import HEARTBEATS, RECORDS, AzureWorld, expected, has_all, la_ids, new_ids

from se_forwarder_testbed.simulator.scenario import Scenario, VmSpec

pytestmark = [pytest.mark.e2e, pytest.mark.tls]

SERVED = {"Service": "checkout", "env": "prod", "owner": "alice@contoso.com", "team": "t" * 300}
WANT = {"service": "checkout", "env": "prod", "team": "t" * 256}  # chosen, keyed as configured


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    scenario = Scenario(vm=VmSpec(name="checkout-1", scale_set="vmss-checkout", tags=SERVED))
    with AzureWorld(tmp_path_factory.mktemp("tags"), rate_limit=None, scenario=scenario) as w:
        yield w


def test_chosen_tags_reach_log_analytics_and_event_hubs(world, clock, tmp_path):
    w = world
    cfg = w.agent_config(
        tmp_path / "state",
        tags=["service", "env", "team"],
        sinks={"log_analytics": w.la_section(), "event_hubs": w.eh_section()},
    )
    agent = AgentRun(cfg, clock)
    try:
        ids = new_ids(2)
        w.publish_events(ids)
        assert agent.wait_for(lambda _a: has_all(la_ids(w), expected(w, ids)), 60)
        assert agent.wait_for(
            lambda _a: len([e for e in w.eh.events if b'"Phase"' in e.body]) >= 2, 60
        )
    finally:
        assert agent.stop() == 0
    records, beats = w.la.records(RECORDS), w.la.records(HEARTBEATS)
    assert records and beats
    assert {json.dumps(r["Tags"], sort_keys=True) for r in records + beats} == {
        json.dumps(WANT, sort_keys=True)
    }
    bodies = [json.loads(e.body) for e in w.eh.events]
    assert {b["RecordId"] for b in bodies if "Phase" in b} >= expected(w, ids)
    assert all(b["Tags"] == WANT for b in bodies)
    # the tag nobody chose is nowhere: not in a row, not in an Event Hubs body
    raw = json.dumps(records + beats) + "".join(e.body.decode() for e in w.eh.events)
    assert "alice" not in raw and "owner" not in raw
    # the value cut to Azure's 256 characters is counted where the heartbeat shows it
    assert max(b["TruncatedValues"] for b in beats) == 1
    assert agent.logged("tags cut or left out (agent.tags)")
