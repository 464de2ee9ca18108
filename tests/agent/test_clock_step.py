"""A wall clock stepped by an hour (issue 18), on the FakeClock: the wall clock jumps, the
monotonic one does not. TimeGenerated stays the wall time of each observation (it does not
freeze); the deltas stay the real time elapsed (the monotonic clock's, within a run); a restart
while the clock is behind gives no negative delta; each step is logged once, not every poll."""

from __future__ import annotations

import json

import pytest

from se_forwarder import tracker
from se_forwarder.timefmt import parse_iso_ms

pytestmark = pytest.mark.e2e  # the simulator over loopback (no process, no real waiting)

VM = "vm-clock"
EID = "5C1D7E00-0000-4A5B-9C3D-0000000000AA"
HOUR = 3600.0


def event(clock, status: str = "Scheduled", **kw) -> dict:
    nb = "" if status == "Started" else clock.wall_seconds() + 900
    return {
        "EventId": EID,
        "EventType": "Reboot",
        "EventStatus": status,
        "Resources": [VM],
        "NotBefore": nb,
        "DurationInSeconds": -1,
        **kw,
    }


def phase(name: str):
    return lambda a: any(r["Phase"] == name for r in a.records())


def rows(path) -> dict[str, dict]:
    return {r["Phase"]: r for r in map(json.loads, path.read_text().splitlines())}


def clock_lines(agent) -> list[dict]:
    return [ln for ln in agent.lines if "clock" in ln["msg"]]


@pytest.fixture
def sim(simulator):
    return simulator(vm_name=VM, rate_limit=None)  # Azure's clock: never stepped


def test_stepped_back_an_hour_time_generated_follows_the_wall_and_deltas_stay_real(
    sim, agent_run, clock, tmp_path
):
    out = tmp_path / "r.jsonl"
    agent = agent_run(sim.url, poll_interval=1.0, file_sink=out)
    sim.set_events([event(clock)])
    assert agent.wait_for(phase("FirstSeen"), 5)
    clock.advance(3)
    clock.step_wall(-HOUR)
    clock.advance(16)  # 16 polls with the clock an hour behind
    sim.set_events([event(clock, "Started")])
    assert agent.wait_for(phase("Started"), 5)
    started_wall = clock.wall_ms()
    clock.advance(5)
    sim.set_events([])
    assert agent.wait_for(phase("Removed"), 5)
    assert agent.stop() == 0
    got = rows(out)
    first, started, removed = got["FirstSeen"], got["Started"], got["Removed"]
    # TimeGenerated is the wall clock of the observation: an hour back, and moving on.
    assert parse_iso_ms(started["TimeGenerated"]) == started_wall
    assert parse_iso_ms(removed["TimeGenerated"]) - parse_iso_ms(started["TimeGenerated"]) == 6000
    # Deltas are the real time elapsed: 3 + 16 + 1 s since FirstSeen, never an hour less.
    assert started["SinceFirstSeenSeconds"] == 20.0 and removed["SinceStartedSeconds"] == 6.0
    assert started["UncertaintySeconds"] == removed["UncertaintySeconds"] == 1.0
    # FirstSeenAt is re-expressed on the stepped clock, so the deltas are the columns' differences.
    assert parse_iso_ms(started["TimeGenerated"]) - parse_iso_ms(started["FirstSeenAt"]) == 20_000
    assert first["FirstSeenAt"] == first["TimeGenerated"]
    [line] = clock_lines(agent)  # once for the step, not once per poll
    assert line["level"] == "warning" and line["by_seconds"] == -HOUR


def test_stepped_forward_an_hour_an_8_s_event_lasts_8_s(sim, agent_run, clock, tmp_path):
    out = tmp_path / "r.jsonl"
    agent = agent_run(sim.url, poll_interval=1.0, file_sink=out)
    sim.set_events([event(clock)])
    assert agent.wait_for(phase("FirstSeen"), 5)
    first_wall = clock.wall_ms()
    clock.advance(4)
    clock.step_wall(HOUR)
    clock.advance(3)
    sim.set_events([event(clock, "Started")])
    assert agent.wait_for(phase("Started"), 5)
    clock.advance(2)
    assert agent.stop() == 0
    started = rows(out)["Started"]
    assert started["SinceFirstSeenSeconds"] == 8.0  # not 3608
    assert started["UncertaintySeconds"] == 1.0
    assert parse_iso_ms(started["TimeGenerated"]) == first_wall + 8000 + 3_600_000  # the wall
    [line] = clock_lines(agent)
    assert line["by_seconds"] == HOUR


def test_a_restart_while_the_clock_is_behind_gives_no_negative_delta(
    sim, agent_run, clock, tmp_path
):
    out = tmp_path / "r.jsonl"
    state = tmp_path / "state"
    first = agent_run(sim.url, name="a", state_dir=state, poll_interval=1.0, file_sink=out)
    sim.set_events([event(clock)])
    assert first.wait_for(phase("FirstSeen"), 5)
    clock.advance(10)
    assert first.stop() == 0
    clock.step_wall(-HOUR)  # while the agent is down
    clock.advance(30)
    sim.set_events([event(clock, "Started")])
    second = agent_run(sim.url, name="b", state_dir=state, poll_interval=1.0, file_sink=out)
    assert second.wait_for(phase("Started"), 5)
    clock.advance(3)
    sim.set_events([])
    assert second.wait_for(phase("Removed"), 5)
    assert second.stop() == 0
    got = rows(out)
    for r in (got["Started"], got["Removed"]):
        deltas = [
            r[k]
            for k in ("SinceFirstSeenSeconds", "SinceStartedSeconds", "UncertaintySeconds")
            if r[k] is not None
        ]
        assert deltas and min(deltas) >= 0, r
    assert got["Removed"]["SinceStartedSeconds"] == 4.0  # within the run: the real time (3 + 1 s)
    [line] = clock_lines(second)
    assert "behind the times already recorded" in line["msg"]


def test_shifting_moves_what_the_agent_saw_and_never_what_azure_said():
    from se_forwarder.imds.parse import parse_json
    from se_forwarder.model import VmIdentity

    doc = parse_json(
        {
            "DocumentIncarnation": 1,
            "Events": [
                {
                    "EventId": "E",
                    "EventType": "Reboot",
                    "ResourceType": "VirtualMachine",
                    "Resources": ["vm"],
                    "EventStatus": "Started",
                    "NotBefore": "",
                    "Description": "",
                    "EventSource": "Platform",
                    "DurationInSeconds": -1,
                }
            ],
        }
    )
    state = tracker.observe(tracker.TrackerState(), 1_000_000, doc, VmIdentity(VmName="vm")).state
    assert tracker.latest_ms(state) == 1_000_000
    moved = tracker.shifted(state, -3_600_000)
    te = moved.events["E"]
    assert (te.first_seen_ms, te.started_ms, moved.last_ok_ms) == (-2_600_000,) * 3
    assert tracker.latest_ms(moved) == -2_600_000 and moved.last_doc == state.last_doc
    assert tracker.latest_ms(tracker.TrackerState()) is None


class Shifted:
    """``clock`` with its wall time ``by`` seconds away: another party's clock."""

    def __init__(self, clock, by: float) -> None:
        self._clock, self._by = clock, by

    def __getattr__(self, name):
        return getattr(self._clock, name)

    def wall_seconds(self) -> float:
        return self._clock.wall_seconds() + self._by

    def wall_ms(self) -> int:
        return self._clock.wall_ms() + round(self._by * 1000)


@pytest.mark.parametrize("step", [HOUR, -HOUR])
def test_notice_is_measured_on_azures_clock_when_the_vms_is_off(
    simulator, agent_run, clock, tmp_path, step
):
    """Issue 33: with the wall clock an hour ahead, NoticeSeconds was off by the hour (-2,408 s
    for an event 20 minutes ahead): Azure's NotBefore compared with the VM's wrong clock,
    although every IMDS answer carries Azure's time in its Date header."""
    azure = Shifted(clock, -step)  # Azure's clock, the VM's off by ``step``
    sim = simulator(vm_name=VM, rate_limit=None, clock=azure)
    out = tmp_path / "r.jsonl"
    beats = tmp_path / "hb.jsonl"
    agent = agent_run(
        sim.url,
        poll_interval=1.0,
        extra=f'[sinks.file]\npath = "{out}"\nheartbeat_path = "{beats}"\n',
    )
    clock.advance(20)
    skew = agent.status_json()["clock_skew_seconds"]
    assert abs(skew + step) <= 1.0  # Azure's minus the VM's, within the Date's second
    side = "ahead of" if step > 0 else "behind"
    assert f"the VM's is {abs(skew):.1f} s {side} Azure's" in agent.status_text()
    nb = azure.wall_seconds() + 1200  # 20 minutes ahead, on Azure's clock
    sim.set_events([dict(event(clock), NotBefore=nb)])
    assert agent.wait_for(phase("FirstSeen"), 5)
    assert agent.stop() == 0
    [stop] = [b for b in map(json.loads, beats.read_text().splitlines()) if b["Reason"] == "stop"]
    assert abs(stop["ClockSkewSeconds"] + step) <= 1.0
    first = rows(out)["FirstSeen"]
    assert 1198.0 <= first["NoticeSeconds"] <= 1201.0  # not 1200 - 3600 (or + 3600)
    assert parse_iso_ms(first["TimeGenerated"]) == pytest.approx(clock.wall_ms(), abs=10_000)


def test_a_right_clock_is_left_as_it_is(simulator, agent_run, clock, tmp_path):
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)  # Azure's and the VM's agree
    out = tmp_path / "r.jsonl"
    agent = agent_run(sim.url, poll_interval=1.0, file_sink=out)
    clock.advance(3.3)
    sim.set_events([event(clock)])
    assert agent.wait_for(phase("FirstSeen"), 5)
    assert abs(agent.status_json()["clock_skew_seconds"]) <= 0.5
    assert agent.stop() == 0
    first = rows(out)["FirstSeen"]
    exact = (parse_iso_ms(first["NotBefore"]) - parse_iso_ms(first["TimeGenerated"])) / 1000
    assert first["NoticeSeconds"] == exact  # to the millisecond: no correction
