"""The real agent as a subprocess against the IMDS simulator over loopback: what only a process
shows (kill -9 and a restart, SIGINT and SIGTERM, the exit status of a bad configuration). The
rest of the lifecycle runs in this process on the FakeClock: test_lifecycle.py.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from se_forwarder_testbed.agentproc import AgentProcess, write_config
from se_forwarder_testbed.simulator.server import Simulator

VM = "WestNO_0"
EID = "C7061BAC-AFDC-4513-B24B-AA5F13A16123"


def freeze(status: str = "Scheduled", notice: float = 600, **kw) -> dict:
    return {
        "EventId": EID,
        "EventType": "Freeze",
        "EventStatus": status,
        "Resources": [VM, "WestNO_1"],
        "NotBefore": time.time() + notice,
        "DurationInSeconds": 5,
        **kw,
    }


pytestmark = [pytest.mark.e2e, pytest.mark.process]


@pytest.fixture
def sim(simulator):
    return simulator(vm_name=VM)


def phases(agent: AgentProcess) -> list[tuple[str, str | None]]:
    return [(r["Phase"], r.get("Outcome")) for r in agent.records()]


def has_phase(phase: str, n: int = 1):
    return lambda a: sum(1 for r in a.records() if r["Phase"] == phase) >= n


@pytest.mark.slow
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


@pytest.mark.slow
def test_sigterm_during_the_slow_first_call_stops_promptly(tmp_path):
    with Simulator(vm_name=VM, first_call_delay=60) as sim:
        cfg = write_config(
            tmp_path / "c.toml", sim.url, tmp_path / "state", imds_extra=""
        )  # first_call_timeout = 10 s in write_config
        cfg.write_text(
            cfg.read_text().replace("first_call_timeout = 10", "first_call_timeout = 120")
        )
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
