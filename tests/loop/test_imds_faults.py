"""IMDS faults are visible at once (issue 11): every failed attempt is a poll error, the first
of a series is logged at once, the cadence, heartbeats and status.json keep their schedule, a
change after the fault is seen at the next tick; the agent is STARTING (not MISSING) while IMDS
is slow at start; polling starts without the instance document and RecordIds keep one VM key
(the VmId).

The agent runs in this process on the FakeClock: the schedules are checked in fake seconds,
exactly, and a series of 25 failed polls takes milliseconds."""

from __future__ import annotations

import json

import pytest

from se_forwarder.model import record_id

pytestmark = pytest.mark.e2e  # the simulator over loopback; no process

VM = "vm-faults"
EID = "1D7D39CB-0000-4A5B-9C3D-000000000001"


def event(clock, **kw) -> dict:
    return {
        "EventId": EID,
        "EventType": "Reboot",
        "Resources": [VM],
        "NotBefore": clock.wall_seconds() + 900,
        "DurationInSeconds": -1,
        **kw,
    }


@pytest.mark.parametrize("kind", ["500", "429", "410", "drop"])
def test_a_fault_is_counted_per_attempt_logged_at_once_and_the_cadence_kept(
    simulator, agent_run, clock, tmp_path, kind
):
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    agent = agent_run(
        sim.url, poll_interval=0.2, heartbeat_interval=1, file_sink=tmp_path / "r.jsonl"
    )
    assert agent.messages("heartbeat")
    polls_before = agent.status_json()["polls"]
    sim.inject(kind, count=25)  # 5 s of failures at 0.2 s polls
    clock.advance(0.2)
    assert agent.messages("bad observation"), "not logged at once"
    clock.advance(1.0)
    beats = len(agent.messages("heartbeat"))
    clock.advance(1.0)
    assert len(agent.messages("heartbeat")) > beats  # heartbeats keep their schedule

    def failing(a) -> bool:
        s = a.status_json()
        return s["last_poll_ok"] is False and s["poll_errors"] >= 5

    assert agent.wait_for(failing, 5)  # status.json keeps its schedule through the fault
    assert clock.wall_seconds() - agent.status_json()["written_at"] <= 5
    assert agent.wait_for(lambda a: sim.pending_faults() == 0, 10)
    t0 = clock.monotonic()
    sim.set_events([event(clock)])
    assert agent.wait_for(lambda a: a.records(), 5)
    assert clock.monotonic() - t0 <= 0.2 + 1e-9, "the change was not seen at the next tick"
    assert len(agent.messages("bad observation")) <= 8  # not one line per failed poll
    assert agent.stop() == 0
    s = agent.status_json()
    assert s["poll_errors"] == 25  # every failed attempt counted, and nothing else
    assert s["polls"] - polls_before >= 25


def test_status_says_starting_not_missing_while_imds_is_slow_at_start(simulator, agent_run, clock):
    sim = simulator(vm_name=VM, first_call_delay=30.0, clock=clock)  # held for 30 real seconds
    agent = agent_run(sim.url, settle=False)
    status = agent.state_dir / "status.json"
    assert sim.wait_until(lambda s: status.exists(), 10)
    verdict = agent.verdict()
    assert verdict.state == "starting" and not verdict.healthy
    assert agent.stop() == 0  # the held call is cut short


def test_polling_starts_without_the_instance_document_and_record_ids_keep_one_vm_key(
    simulator, agent_run, clock, tmp_path
):
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    sim.instance_status = 500
    sim.set_events([event(clock)])
    out = tmp_path / "r.jsonl"
    agent = agent_run(sim.url, poll_interval=0.2, file_sink=out, agent_extra=f'vm_name = "{VM}"')
    assert agent.agent.recorder.stats.polls > 0, "polling waited for the instance document"
    assert not agent.records()  # the FirstSeen waits for the identity (hold.py), polling does not
    clock.advance(3)
    sim.instance_status = None  # the instance document arrives late
    assert agent.wait_for(lambda a: a.messages("VM identity"), 30)
    assert agent.wait_for(lambda a: a.records(), 5)
    [first] = agent.records()
    assert first["Phase"] == "FirstSeen" and first["AffectsThisVm"] is True
    sim.set_events([event(clock, EventStatus="Started", NotBefore="")])
    assert agent.wait_for(lambda a: len(a.records()) >= 2, 5)
    assert agent.stop() == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["Phase"] for r in rows] == ["FirstSeen", "Started"]
    assert rows[0]["VmId"] == rows[1]["VmId"] == sim.scenario.vm.vm_id
    assert rows[0]["TimeGenerated"] < rows[1]["TimeGenerated"]  # seen when it was, sent later
    assert rows[0]["VmName"] == rows[1]["VmName"] == VM
    # Both RecordIds use the VmId, as a restart with the identity known at once would (issue 33:
    # the held FirstSeen kept the key made before the document answered, the VM name).
    vm_id = sim.scenario.vm.vm_id
    assert [r["RecordId"] for r in rows] == [
        record_id(vm_id, EID, "FirstSeen"),
        record_id(vm_id, EID, "Started"),
    ]


def test_status_turns_unhealthy_within_15_seconds_of_imds_answering_500(
    simulator, agent_run, clock
):
    """Issue 33: it stayed HEALTHY for about 55 s of 500s (the limit was 60 s of failing)."""
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    agent = agent_run(sim.url, poll_interval=1.0)
    assert agent.wait_for(lambda a: a.verdict().healthy, 10)
    sim.inject("500", count=1000)
    first_failure = clock.monotonic()
    assert agent.wait_for(lambda a: a.verdict().state == "unhealthy", 30)
    assert clock.monotonic() - first_failure <= 15
    assert any("polls of IMDS failing" in p for p in agent.verdict().problems)
    assert agent.stop() == 0
