"""No record claims the wrong VM (issue 18: with IMDS refusing connections for 40 s at start, the
first FirstSeen went out with VmId null, the host name as VmName and AffectsThisVm false,
although the event named this VM). Records wait for the instance document, at most
``hold.HOLD_SECONDS``, asking for it at every poll meanwhile; past that, or at a stop, they go
saying they do not know (IdentityKnown false, VmName null unless agent.vm_name is set,
AffectsThisVm null). In this process, on the FakeClock."""

from __future__ import annotations

import json
import socket

from se_forwarder.model import record_id
from se_forwarder.recording.hold import HOLD_SECONDS

VM = "vmss_3"  # a scale-set VM: its name is not the host name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def file_rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def event(clock) -> dict:
    return {
        "EventId": "ID-1",
        "EventType": "Reboot",
        "Resources": [VM],
        "NotBefore": clock.wall_seconds() + 900,
    }


def _answering_events_first(simulator, port, agent, clock):
    """IMDS comes up on ``port`` with the event, and its instance document answers once the
    record waits for it: an agent retrying the document at the same poll would otherwise get it
    before it sees the event, and nothing would be held (a retry's jitter decides the order)."""
    sim = simulator(port=port, vm_name=VM, rate_limit=None, clock=clock, instance_status=503)
    sim.set_events([event(clock)])
    assert agent.wait_for(lambda a: a.agent.recorder.hold.waiting, 30)
    sim.instance_status = None
    return sim


def test_records_wait_for_the_identity_when_imds_refuses_at_start(
    simulator, agent_run, clock, tmp_path
):
    assert socket.gethostname() != VM
    port = free_port()
    out = tmp_path / "records.jsonl"
    agent = agent_run(f"http://127.0.0.1:{port}", file_sink=out, poll_interval=1.0)
    clock.advance(40)  # nothing listens: every request is refused
    assert agent.alive and not agent.records()
    sim = _answering_events_first(simulator, port, agent, clock)
    assert agent.wait_for(lambda a: a.records(), 30)
    assert agent.wait_for(lambda a: file_rows(out), 10)
    # the delay is said (when it starts and ends) and counted where status shows it
    assert agent.logged("records held until the instance document answers", records=1)
    [went] = agent.messages("held records go on with the VM's identity")
    assert went["records"] == 1 and 0 <= went["held_seconds"] <= HOLD_SECONDS
    assert agent.stop() == 0
    assert agent.status_json()["held_records"] == 1
    [first] = [r for r in file_rows(out) if r["Phase"] == "FirstSeen"]
    assert first["VmName"] == VM and first["VmId"] == sim.scenario.vm.vm_id
    assert first["AffectsThisVm"] is True and first["IdentityKnown"] is True
    assert first["Computer"] == socket.gethostname()


def test_without_the_instance_document_records_go_after_the_bound_saying_so(
    simulator, agent_run, clock, tmp_path
):
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    sim.instance_status = 500
    out = tmp_path / "records.jsonl"
    agent = agent_run(sim.url, file_sink=out, poll_interval=1.0)
    sim.set_events([event(clock)])
    clock.advance(HOLD_SECONDS - 2)
    assert not file_rows(out) and not agent.records()  # held, not sent as this VM's or not
    asked = [r for r in sim.requests if r.path.startswith("/metadata/instance")]
    assert len(asked) >= HOLD_SECONDS - 4  # asked at every poll while records wait
    assert agent.wait_for(lambda a: file_rows(out), 10)
    [first] = file_rows(out)
    assert first["IdentityKnown"] is False and first["VmId"] is None
    assert first["VmName"] is None and first["AffectsThisVm"] is None
    assert agent.logged("instance document still unavailable", records=1)
    sim.set_events([dict(event(clock), NotBefore=clock.wall_seconds() + 1800)])
    assert agent.wait_for(lambda a: len(file_rows(out)) == 2, 5)  # later records: at once
    assert agent.stop() == 0
    assert agent.status_json()["held_records"] == 1  # the first only


def test_agent_vm_name_decides_affects_this_vm_when_the_document_never_answers(
    simulator, agent_run, clock, tmp_path
):
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    sim.instance_status = 503
    out = tmp_path / "records.jsonl"
    agent = agent_run(sim.url, file_sink=out, poll_interval=1.0, agent_extra=f'vm_name = "{VM}"')
    sim.set_events([event(clock)])
    assert agent.wait_for(lambda a: file_rows(out), HOLD_SECONDS + 10)
    [first] = file_rows(out)
    assert (first["VmName"], first["AffectsThisVm"], first["IdentityKnown"]) == (VM, True, False)
    assert agent.stop() == 0


def test_records_held_at_a_stop_are_sent_not_left_behind(simulator, agent_run, clock, tmp_path):
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    sim.instance_status = 500
    out = tmp_path / "records.jsonl"
    agent = agent_run(sim.url, file_sink=out, poll_interval=1.0)
    sim.set_events([event(clock)])
    assert agent.wait_for(lambda a: a.agent.recorder.hold.waiting, 5)
    assert agent.stop() == 0
    [first] = file_rows(out)
    assert first["Phase"] == "FirstSeen" and first["IdentityKnown"] is False


def test_held_records_get_the_ids_the_vm_id_makes_as_after_a_restart(
    simulator, agent_run, clock, tmp_path
):
    """Issue 33: released with the identity, they kept ids built from the host name, so the
    same fact recorded after a restart (the identity known at once) carried another id."""
    port = free_port()
    out = tmp_path / "records.jsonl"
    state = tmp_path / "state"
    agent = agent_run(f"http://127.0.0.1:{port}", file_sink=out, state_dir=state, name="first")
    clock.advance(5)  # refused: the events are seen before the instance document answers
    sim = _answering_events_first(simulator, port, agent, clock)
    assert agent.wait_for(lambda a: file_rows(out), 30)
    assert agent.logged("records held until the instance document answers", records=1)
    vm_id = sim.scenario.vm.vm_id
    [first] = [r for r in file_rows(out) if r["Phase"] == "FirstSeen"]
    assert first["VmId"] == vm_id
    assert first["RecordId"] == record_id(vm_id, "ID-1", "FirstSeen")
    assert agent.stop() == 0

    again = agent_run(sim.url, file_sink=out, state_dir=state, name="second")
    sim.set_events([dict(event(clock), EventStatus="Started")])
    assert again.wait_for(lambda a: [r for r in file_rows(out) if r["Phase"] == "Started"], 30)
    [started] = [r for r in file_rows(out) if r["Phase"] == "Started"]
    assert started["RecordId"] == record_id(vm_id, "ID-1", "Started")
    assert again.stop() == 0
