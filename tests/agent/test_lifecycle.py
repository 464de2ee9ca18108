"""The agent in this process on the FakeClock (``agent_run``) against the IMDS simulator over
loopback: the lifecycle through the file sink, restarts, a cancelled event, bursts of faults
within the request budget, a slow first call, an unreachable IMDS, a corrupt database.

Each test drives the simulator's document by hand, so the expected records follow from the
contract step by step; the agent's 'record' log lines are written right after each commit.
What only a process shows (kill -9, signals, exit codes) is in test_agent_e2e.py."""

from __future__ import annotations

import json

import pytest
from helpers import DEAD_PROXY

VM = "WestNO_0"
EID = "C7061BAC-AFDC-4513-B24B-AA5F13A16123"

pytestmark = pytest.mark.e2e  # the simulator over loopback; no process, no real waiting


def freeze(clock, status: str = "Scheduled", notice: float = 600, **kw) -> dict:
    return {
        "EventId": EID,
        "EventType": "Freeze",
        "EventStatus": status,
        "Resources": [VM, "WestNO_1"],
        "NotBefore": clock.wall_seconds() + notice,
        "DurationInSeconds": 5,
        **kw,
    }


@pytest.fixture
def sim(simulator, clock):
    return simulator(vm_name=VM, clock=clock)


def phases(agent) -> list[tuple[str, str | None]]:
    return [(r["Phase"], r.get("Outcome")) for r in agent.records()]


def has_phase(phase: str, n: int = 1):
    return lambda a: sum(1 for r in a.records() if r["Phase"] == phase) >= n


def test_lifecycle_end_to_end_through_the_file_sink_with_a_dead_proxy(
    sim, agent_run, clock, tmp_path, monkeypatch
):
    for var, value in DEAD_PROXY.items():
        monkeypatch.setenv(var, value)
    out = tmp_path / "records.jsonl"
    agent = agent_run(sim.url, file_sink=out)
    assert agent.messages("agent starting")
    sim.set_events([freeze(clock)])
    assert agent.wait_for(has_phase("FirstSeen"), 10)
    sim.set_events([freeze(clock, "Started")])
    assert agent.wait_for(has_phase("Started"), 10)
    sim.set_events([])
    assert agent.wait_for(has_phase("Removed"), 10)
    assert agent.stop() == 0
    assert phases(agent) == [("FirstSeen", None), ("Started", None), ("Removed", "Completed")]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["Phase"] for r in lines] == ["FirstSeen", "Started", "Removed"]
    first, started, removed = lines
    # Identity columns come from the instance document.
    assert first["VmName"] == VM and first["VmId"] == sim.scenario.vm.vm_id
    assert first["AffectsThisVm"] is True and first["EventId"] == EID
    assert 599 <= first["NoticeSeconds"] <= 600
    assert started["StartedAt"] == started["TimeGenerated"] and started["NotBefore"] is None
    assert removed["SinceStartedSeconds"] > 0 and removed["UncertaintySeconds"] == 0.2
    # Every request went straight to the simulator, with the header, never forwarded.
    reqs = sim.requests
    assert reqs and all(r.headers.get("Metadata") == "true" for r in reqs)
    assert not any("X-Forwarded-For" in r.headers for r in reqs)
    assert not any(r.status == 400 for r in reqs)
    status = agent.status_json()
    assert status["stopped"] is True and status["delivered"] >= 3
    assert agent.messages("agent stopped")


def test_removed_while_down_and_never_started_is_unknown(sim, agent_run, clock, tmp_path):
    state = tmp_path / "state"
    a1 = agent_run(sim.url, name="a1", state_dir=state)
    sim.set_events([freeze(clock)])
    assert a1.wait_for(has_phase("FirstSeen"), 10)
    assert a1.stop() == 0  # a clean stop
    sim.set_events([])
    clock.advance(5)  # while it is down
    a2 = agent_run(sim.url, name="a2", state_dir=state)
    assert a2.wait_for(has_phase("Removed"), 10)
    assert a2.stop() == 0
    assert phases(a2) == [("Removed", "Unknown")]
    assert a2.records()[0]["UncertaintySeconds"] >= 5.0  # the downtime is in it


def test_cancelled_within_the_same_run(sim, agent_run, clock):
    agent = agent_run(sim.url)
    sim.set_events([freeze(clock)])
    assert agent.wait_for(has_phase("FirstSeen"), 10)
    sim.set_events([])
    assert agent.wait_for(has_phase("Removed"), 10)
    assert agent.stop() == 0
    assert phases(agent) == [("FirstSeen", None), ("Removed", "Cancelled")]


def test_bursts_of_429_410_500_and_bad_bodies_are_survived_within_the_budget(sim, agent_run, clock):
    agent = agent_run(sim.url, poll_interval=0.2)
    for kind, n in (
        ("429", 2),
        ("410", 2),
        ("500", 2),
        ("garbage", 1),
        ("empty", 1),
        ("wrong_shape", 1),
    ):
        sim.inject(kind, count=n)
    assert agent.wait_for(lambda a: sim.pending_faults() == 0, 30)
    sim.set_events([freeze(clock)])
    assert agent.wait_for(has_phase("FirstSeen"), 15)
    bad = agent.messages("bad observation")
    assert agent.stop() == 0
    reasons = " | ".join(b["reason"] for b in bad)
    assert "invalid JSON" in reasons and "empty body" in reasons and "wrong shape" in reasons
    # The simulator (on the same clock) never had to refuse the agent for going over 5 requests
    # per second: the only 429s are the two injected.
    assert [r.status for r in sim.requests].count(429) == 2
    times = sorted(r.at for r in sim.requests)
    worst = max(sum(1 for u in times if t <= u < t + 1.0) for t in times)
    assert worst <= 5
    assert phases(agent) == [("FirstSeen", None)]


@pytest.mark.slow
def test_slow_first_call_is_waited_for(simulator, agent_run, clock):
    sim = simulator(vm_name=VM, clock=clock, first_call_delay=2.0)  # real seconds
    sim.set_events([freeze(clock)])
    agent = agent_run(sim.url)  # first_call_timeout = 10 s, timeout = 2 s (write_config)
    assert agent.wait_for(has_phase("FirstSeen"), 20)
    assert agent.stop() == 0
    assert not agent.messages("bad observation")


def test_unreachable_imds_is_logged_and_the_agent_keeps_trying(agent_run, clock):
    agent = agent_run("http://127.0.0.1:9")
    assert agent.wait_for(lambda a: a.messages("instance document unavailable; retrying"), 15)
    clock.advance(60)
    assert agent.alive
    polls = agent.status_json()["polls"]
    assert polls >= 250 and agent.status_json()["poll_errors"] == polls  # it keeps polling
    assert agent.stop() == 0
    line = agent.messages("instance document unavailable; retrying")[0]
    assert "connection refused" in line["error"]


def test_a_corrupt_state_database_is_moved_aside_and_the_agent_carries_on(
    sim, agent_run, clock, tmp_path
):
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.db").write_bytes(b"\x00garbage, not a database" * 200)
    agent = agent_run(sim.url, state_dir=state)
    sim.set_events([freeze(clock)])
    assert agent.wait_for(has_phase("FirstSeen"), 15)
    assert agent.stop() == 0
    [line] = [ln for ln in agent.lines if "moved aside" in ln.get("msg", "")]
    assert line["level"] == "critical"
    assert list(state.glob("state.db.corrupt-*"))
