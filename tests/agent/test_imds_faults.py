"""IMDS faults are visible at once (issue 11): every failed attempt is a poll error, the first
of a series is logged at once, the cadence, heartbeats and status.json keep their schedule, a
change after the fault is seen at the next tick; the agent is STARTING (not MISSING) while IMDS
is slow at start; polling starts without the instance document and RecordIds keep one VM key."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from se_forwarder.model import record_id

pytestmark = pytest.mark.e2e

VM = "vm-faults"
EID = "1D7D39CB-0000-4A5B-9C3D-000000000001"


def event(**kw) -> dict:
    return {"EventId": EID, "EventType": "Reboot", "Resources": [VM],
            "NotBefore": time.time() + 900, "DurationInSeconds": -1, **kw}


def status(state_dir) -> dict:
    return json.loads((state_dir / "status.json").read_text())


@pytest.mark.parametrize("kind", ["500", "429", "410", "drop"])
def test_a_fault_is_counted_per_attempt_logged_at_once_and_the_cadence_kept(
        simulator, agent_process, tmp_path, kind):
    sim = simulator(vm_name=VM, rate_limit=None)
    agent = agent_process(sim.url, poll_interval=0.2, heartbeat_interval=1,
                          file_sink=tmp_path / "r.jsonl")
    state = tmp_path / "agent-state"
    try:
        assert agent.wait_for(lambda a: a.messages("heartbeat"), 15)
        sim.inject(kind, count=25)  # ~5 s of failures at 0.2 s polls
        assert agent.wait_for(lambda a: a.messages("bad observation"), 3), "not logged at once"

        def failing(_a) -> bool:
            s = status(state)
            return s["last_poll_ok"] is False and s["poll_errors"] >= 5
        assert agent.wait_for(failing, 7)  # status.json keeps its schedule through the fault
        assert time.time() - status(state)["written_at"] < 6
        beats = len(agent.messages("heartbeat"))
        assert agent.wait_for(lambda a: len(a.messages("heartbeat")) > beats, 3)
        assert agent.wait_for(lambda a: sim.pending_faults() == 0, 15)
        t0 = time.time()
        sim.set_events([event()])
        assert agent.wait_for(lambda a: a.records(), 3), "the change was not seen at the next tick"
        assert time.time() - t0 < 2.0
        assert len(agent.messages("bad observation")) <= 8  # not one line per failed poll
    finally:
        assert agent.stop() == 0
    assert status(state)["poll_errors"] >= 25  # every failed attempt counted


def test_status_says_starting_not_missing_while_imds_is_slow_at_start(simulator, agent_process,
                                                                       tmp_path):
    sim = simulator(vm_name=VM, first_call_delay=8.0)
    agent = agent_process(sim.url)
    state = tmp_path / "agent-state"
    try:
        assert agent.wait_for(lambda a: (state / "status.json").exists(), 5)
        r = subprocess.run([sys.executable, "-m", "se_forwarder.cli", "status", "--json",
                            "--state-dir", str(state)], capture_output=True, text=True,
                           timeout=30, check=False)
        verdict = json.loads(r.stdout)
        assert verdict["state"] == "starting" and r.returncode == 1
    finally:
        agent.stop()


def test_polling_starts_without_the_instance_document_and_record_ids_keep_one_vm_key(
        simulator, agent_process, tmp_path):
    sim = simulator(vm_name=VM, rate_limit=None)
    sim.instance_status = 500
    sim.set_events([event()])
    out = tmp_path / "r.jsonl"
    agent = agent_process(sim.url, poll_interval=0.2, file_sink=out, agent_extra=f'vm_name = "{VM}"')
    try:
        assert agent.wait_for(lambda a: a.records(), 5), "polling waited for the instance document"
        [first] = agent.records()
        assert first["Phase"] == "FirstSeen" and first["AffectsThisVm"] is True
        sim.instance_status = None  # the instance document arrives late
        assert agent.wait_for(lambda a: a.messages("VM identity"), 30)
        sim.set_events([event(EventStatus="Started", NotBefore="")])
        assert agent.wait_for(lambda a: len(a.records()) >= 2, 5)
    finally:
        assert agent.stop() == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["Phase"] for r in rows] == ["FirstSeen", "Started"]
    assert rows[0]["VmId"] is None and rows[1]["VmId"] == sim.scenario.vm.vm_id
    assert rows[0]["VmName"] == rows[1]["VmName"] == VM
    # Both RecordIds use the key fixed at the first record (the VM name), not VmId later on.
    assert [r["RecordId"] for r in rows] == [record_id(VM, EID, "FirstSeen"),
                                             record_id(VM, EID, "Started")]
