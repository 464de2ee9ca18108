"""Disk full: the agent keeps polling, says DISK FULL (with the count) where `status` reads it,
logs it once a minute rather than every poll, and records what changed once space is back.
The state directory is a 2 MB tmpfs of its own (the test runs as root, as CI does); the agent
runs in this process on the FakeClock, so a minute of failed polls takes milliseconds."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

pytestmark = pytest.mark.e2e

VM = "vm-disk"


@pytest.fixture
def small_disk(tmp_path):
    where = tmp_path / "state"
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(where)],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, f"needs root to mount a tmpfs (CI runs as root): {r.stderr}"
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def fill(directory, name="filler"):
    """Take every free block; the file is removed to give the space back."""
    path = directory / name
    with path.open("wb", buffering=0) as f:  # nothing left in a buffer to fail at close
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return path


def test_disk_full_is_reported_and_nothing_is_lost_once_space_is_back(
        simulator, agent_run, clock, tmp_path, small_disk):
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    out = tmp_path / "records.jsonl"
    agent = agent_run(sim.url, state_dir=small_disk, poll_interval=0.2, file_sink=out)
    assert agent.messages("heartbeat")
    filler = fill(small_disk)
    sim.set_events([{"EventId": "DF-1", "EventType": "Reboot", "Resources": [VM],
                     "NotBefore": clock.wall_seconds() + 900, "Description": "x" * 20_000}])
    full = "disk full: cannot persist records; will diff again at the next poll"
    assert agent.wait_for(lambda a: a.messages(full), 10)
    clock.advance(50)  # 250 failed polls and ten status.json writes
    verdict = agent.verdict()
    assert verdict.state == "disk full", verdict
    assert any("failed commits" in p for p in verdict.problems)
    assert len(agent.messages(full)) == 1  # once a minute, not every poll
    clock.advance(15)
    assert len(agent.messages(full)) == 2  # ... and again after a minute
    assert agent.alive and not agent.records()
    os.unlink(filler)
    assert agent.wait_for(lambda a: a.records(), 10)
    assert agent.wait_for(lambda a: a.messages("state directory writable again"), 5)
    assert agent.stop() == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["EventId"], r["Phase"]) for r in rows] == [("DF-1", "FirstSeen")]
