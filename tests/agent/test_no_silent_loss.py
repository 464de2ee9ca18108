"""Nothing lost without a word: drops made before a restart reach a heartbeat after it; a huge
document does not leave its memory or its size behind. Processes: the first needs a kill -9
(no stop heartbeat), the second the process's own resident memory."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.process, pytest.mark.slow]

VM = "vm-loss"


def event(i: int) -> dict:
    return {
        "EventId": f"L-{i:04d}",
        "EventType": "Freeze",
        "Resources": [VM],
        "NotBefore": time.time() + 900,
        "Description": "d" * 800,
        "DurationInSeconds": 5,
    }


def test_drops_before_a_restart_reach_a_heartbeat_after_it(simulator, agent_process, tmp_path):
    sim = simulator(vm_name=VM, rate_limit=None)
    state = tmp_path / "state"
    spool = "max_bytes = 6000\n"
    first = agent_process(
        sim.url, name="a", state_dir=state, poll_interval=0.2, extra=f"\n[spool]\n{spool}"
    )  # no sink: everything stays spooled
    assert first.wait_for(lambda a: a.messages("heartbeat"), 15)
    for i in range(12):  # ~12 KB of records into a 6 KB spool, after the start heartbeat
        sim.set_events([event(j) for j in range(i + 1)])
        time.sleep(0.3)
    assert first.wait_for(
        lambda a: a.messages("spool bound reached: dropped the oldest records"), 10
    )
    dropped = sum(
        m["dropped"] for m in first.messages("spool bound reached: dropped the oldest records")
    )
    first.stop(signal.SIGKILL)  # no stop heartbeat: the drops were never reported
    second = agent_process(
        sim.url, name="b", state_dir=state, poll_interval=0.2, extra=f"\n[spool]\n{spool}"
    )
    try:
        assert second.wait_for(lambda a: a.messages("heartbeat"), 15)
    finally:
        assert second.stop() == 0
    # The start heartbeat of the new run (as logged when it was committed: the spool bound may
    # drop the row itself later) carries the drops the killed run never reported.
    [start] = [m for m in second.messages("heartbeat") if m["Reason"] == "start"]
    assert start["DroppedRecords"] >= dropped > 0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_20_mb_description_leaves_neither_its_memory_nor_its_size_behind(
    simulator, agent_process, tmp_path
):
    sim = simulator(vm_name=VM, rate_limit=None)
    state = tmp_path / "state"
    agent = agent_process(
        sim.url, state_dir=state, poll_interval=0.5, file_sink=tmp_path / "r.jsonl"
    )
    try:
        assert agent.wait_for(lambda a: a.messages("heartbeat"), 15)
        before = rss_mb(agent.proc.pid)
        huge = dict(event(1), Description="x" * 20_000_000)
        sim.set_events([huge])
        assert agent.wait_for(lambda a: a.records(), 30)
        assert agent.wait_for(lambda a: a.messages("values over the size limit were truncated"), 5)
        time.sleep(3)  # served a few more times: compared by its digest
        sim.set_events([event(1)])  # the same event, a normal description now: an Updated
        assert agent.wait_for(lambda a: len(a.records()) >= 2, 10)
        time.sleep(2)
        after = rss_mb(agent.proc.pid)
    finally:
        assert agent.stop() == 0
    assert after - before < 40, (before, after)
    size = sum(p.stat().st_size for p in state.glob("state.db*"))
    assert size < 5 * 1024 * 1024, size
    rows = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert "truncated" in rows[0]["Description"] and len(rows[0]["Description"]) < 70_000
