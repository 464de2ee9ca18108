"""The real agent as a subprocess against the IMDS simulator over loopback.

Each test drives the simulator's document by hand, so the expected records follow from the
contract step by step; the agent's 'record' log lines are written right after each commit, so
they show exactly what the tracker committed, run after run.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from helpers import DEAD_PROXY

from se_forwarder_testbed.agentproc import AgentProcess, write_config
from se_forwarder_testbed.simulator.server import Simulator

VM = "WestNO_0"
EID = "C7061BAC-AFDC-4513-B24B-AA5F13A16123"


def freeze(status: str = "Scheduled", notice: float = 600, **kw) -> dict:
    return {"EventId": EID, "EventType": "Freeze", "EventStatus": status, "Resources": [VM, "WestNO_1"],
            "NotBefore": time.time() + notice, "DurationInSeconds": 5, **kw}


pytestmark = pytest.mark.e2e


@pytest.fixture
def sim(simulator):
    return simulator(vm_name=VM)


def phases(agent: AgentProcess) -> list[tuple[str, str | None]]:
    return [(r["Phase"], r.get("Outcome")) for r in agent.records()]


def has_phase(phase: str, n: int = 1):
    return lambda a: sum(1 for r in a.records() if r["Phase"] == phase) >= n


def test_lifecycle_end_to_end_through_the_file_sink_with_a_dead_proxy(sim, tmp_path):
    out = tmp_path / "records.jsonl"
    cfg = write_config(tmp_path / "c.toml", sim.url, tmp_path / "state", file_sink=out)
    agent = AgentProcess(cfg, env=DEAD_PROXY)
    try:
        assert agent.wait_for(lambda a: a.messages("agent starting"), 15)
        sim.set_events([freeze()])
        assert agent.wait_for(has_phase("FirstSeen"), 10), agent.raw
        sim.set_events([freeze("Started")])
        assert agent.wait_for(has_phase("Started"), 10)
        sim.set_events([])
        assert agent.wait_for(has_phase("Removed"), 10)
    finally:
        rc = agent.stop()
    assert rc == 0
    assert phases(agent) == [("FirstSeen", None), ("Started", None), ("Removed", "Completed")]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["Phase"] for r in lines] == ["FirstSeen", "Started", "Removed"]
    first, started, removed = lines
    # Identity columns come from the instance document.
    assert first["VmName"] == VM and first["VmId"] == sim.scenario.vm.vm_id
    assert first["AffectsThisVm"] is True and first["EventId"] == EID
    assert 590 <= first["NoticeSeconds"] <= 600
    assert started["StartedAt"] == started["TimeGenerated"] and started["NotBefore"] is None
    assert removed["SinceStartedSeconds"] > 0 and removed["UncertaintySeconds"] < 2
    # Every request went straight to the simulator, with the header, never forwarded.
    reqs = sim.requests
    assert reqs and all(r.headers.get("Metadata") == "true" for r in reqs)
    assert not any("X-Forwarded-For" in r.headers for r in reqs)
    assert not any(r.status == 400 for r in reqs)
    status = json.loads((tmp_path / "state" / "status.json").read_text())
    assert status["stopped"] is True and status["delivered"] >= 3
    assert agent.messages("agent stopped")


def test_kill9_mid_lifecycle_then_restart_neither_repeats_nor_misses(sim, tmp_path):
    cfg = write_config(tmp_path / "c.toml", sim.url, tmp_path / "state")
    a1 = AgentProcess(cfg)
    sim.set_events([freeze()])
    assert a1.wait_for(has_phase("FirstSeen"), 15), a1.raw
    a1.kill9()
    sim.set_events([freeze("Started")])  # happens while the agent is down
    time.sleep(1.0)
    a2 = AgentProcess(cfg)
    try:
        assert a2.wait_for(has_phase("Started"), 15), a2.raw
        sim.set_events([])
        assert a2.wait_for(has_phase("Removed"), 10)
    finally:
        assert a2.stop() == 0
    assert phases(a1) == [("FirstSeen", None)]
    assert phases(a2) == [("Started", None), ("Removed", "Completed")]  # FirstSeen not repeated
    started = a2.records()[0]
    all_ids = [r["RecordId"] for r in a1.records() + a2.records()]
    assert len(all_ids) == len(set(all_ids)) == 3
    # The Started record's uncertainty spans the downtime (kill, 1 s pause, restart).
    assert started["UncertaintySeconds"] >= 1.0
    assert started["DocumentIncarnation"] == sim.incarnation - 1


def test_removed_while_down_and_never_started_is_unknown(sim, tmp_path):
    cfg = write_config(tmp_path / "c.toml", sim.url, tmp_path / "state")
    a1 = AgentProcess(cfg)
    sim.set_events([freeze()])
    assert a1.wait_for(has_phase("FirstSeen"), 15)
    assert a1.stop() == 0  # a clean stop this time
    sim.set_events([])
    a2 = AgentProcess(cfg)
    try:
        assert a2.wait_for(has_phase("Removed"), 15), a2.raw
    finally:
        a2.stop()
    assert phases(a2) == [("Removed", "Unknown")]


def test_cancelled_within_the_same_run(sim, tmp_path):
    cfg = write_config(tmp_path / "c.toml", sim.url, tmp_path / "state")
    agent = AgentProcess(cfg)
    try:
        sim.set_events([freeze()])
        assert agent.wait_for(has_phase("FirstSeen"), 15)
        sim.set_events([])
        assert agent.wait_for(has_phase("Removed"), 10)
    finally:
        agent.stop()
    assert phases(agent) == [("FirstSeen", None), ("Removed", "Cancelled")]


def test_bursts_of_429_410_500_and_bad_bodies_are_survived_within_the_budget(sim, tmp_path):
    cfg = write_config(tmp_path / "c.toml", sim.url, tmp_path / "state", poll_interval=0.2)
    agent = AgentProcess(cfg)
    try:
        assert agent.wait_for(lambda a: a.messages("agent starting") and sim.requests, 15)
        for kind, n in (("429", 2), ("410", 2), ("500", 2), ("garbage", 1), ("empty", 1), ("wrong_shape", 1)):
            sim.inject(kind, count=n)
        assert agent.wait_for(lambda a: sim.pending_faults() == 0, 30)
        sim.set_events([freeze()])
        assert agent.wait_for(has_phase("FirstSeen"), 15)
        bad = agent.messages("bad observation")
    finally:
        assert agent.stop() == 0
    reasons = " | ".join(b["reason"] for b in bad)
    assert "invalid JSON" in reasons and "empty body" in reasons and "wrong shape" in reasons
    # The simulator never had to refuse the agent for going over 5 requests per second.
    times = sorted(r.at for r in sim.requests)
    worst = max(sum(1 for u in times if t <= u < t + 1.0) for t in times)
    assert worst <= 5
    assert phases(agent) == [("FirstSeen", None)]


def test_slow_first_call_is_waited_for(tmp_path):
    with Simulator(vm_name=VM, first_call_delay=2.0) as sim:
        cfg = write_config(tmp_path / "c.toml", sim.url, tmp_path / "state",
                           imds_extra="")  # first_call_timeout = 10, timeout = 2 (write_config)
        sim.set_events([freeze()])
        agent = AgentProcess(cfg)
        try:
            assert agent.wait_for(has_phase("FirstSeen"), 20), agent.raw
        finally:
            agent.stop()
        assert not agent.messages("bad observation")


def test_unreachable_imds_is_logged_and_the_agent_keeps_trying(tmp_path):
    cfg = write_config(tmp_path / "c.toml", "http://127.0.0.1:9", tmp_path / "state")
    agent = AgentProcess(cfg)
    try:
        assert agent.wait_for(lambda a: a.messages("instance document unavailable; retrying"), 15)
        assert agent.proc.poll() is None
    finally:
        rc = agent.stop()
    assert rc == 0
    line = agent.messages("instance document unavailable; retrying")[0]
    assert "connection refused" in line["error"]


def test_bad_config_exits_2_naming_the_key(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[imds]\nendpoint = "https://169.254.169.254"\n[agent]\npoll_interval = -1\n')
    agent = AgentProcess(cfg)
    rc = agent.proc.wait(15)
    agent._reader.join(5)
    assert rc == 2
    text = "".join(agent.raw)
    assert "imds.endpoint" in text and "agent.poll_interval" in text


def test_sigint_also_stops_cleanly(sim, tmp_path):
    cfg = write_config(tmp_path / "c.toml", sim.url, tmp_path / "state", heartbeat_interval=300)
    agent = AgentProcess(cfg)
    assert agent.wait_for(lambda a: a.messages("heartbeat"), 15)
    assert agent.stop(signal.SIGINT) == 0
    reasons = [h["Reason"] for h in agent.messages("heartbeat")]
    assert reasons == ["start", "stop"]
    assert Path(tmp_path / "state" / "state.db").exists()


def test_a_corrupt_state_database_is_moved_aside_and_the_agent_carries_on(sim, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.db").write_bytes(b"\x00garbage, not a database" * 200)
    cfg = write_config(tmp_path / "c.toml", sim.url, state)
    agent = AgentProcess(cfg)
    try:
        sim.set_events([freeze()])
        assert agent.wait_for(has_phase("FirstSeen"), 15), agent.raw
    finally:
        assert agent.stop() == 0
    [line] = [ln for ln in agent.lines if "moved aside" in ln.get("msg", "")]
    assert line["level"] == "critical"
    assert list(state.glob("state.db.corrupt-*"))


def test_sigterm_during_the_slow_first_call_stops_promptly(tmp_path):
    with Simulator(vm_name=VM, first_call_delay=60) as sim:
        cfg = write_config(tmp_path / "c.toml", sim.url, tmp_path / "state",
                           imds_extra="")  # first_call_timeout = 10 s in write_config
        cfg.write_text(cfg.read_text().replace("first_call_timeout = 10", "first_call_timeout = 120"))
        agent = AgentProcess(cfg)
        # The instance document, then the enabling call, which the simulator holds for 60 s
        # (it logs a request when it answers).
        assert agent.wait_for(lambda a: a.messages("heartbeat"), 15)
        time.sleep(1.0)  # inside the enabling call now
        assert not any("scheduledevents" in r.path for r in sim.requests)
        t0 = time.monotonic()
        assert agent.stop() == 0
        assert time.monotonic() - t0 < 10  # not the 60 s the call would take
    status = json.loads((tmp_path / "state" / "status.json").read_text())
    assert status["stopped"] is True
    assert not agent.messages("bad observation")  # the interrupted call is not an observation
