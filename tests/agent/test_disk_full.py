"""Disk full: the agent keeps polling, says DISK FULL (with the count) where `status` reads it,
logs it once a minute rather than every poll, and records what changed once space is back.
The state directory is a 2 MB tmpfs of its own (the test runs as root, as CI does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

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
    with path.open("wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return path


def status(state) -> dict:
    r = subprocess.run([sys.executable, "-m", "se_forwarder.cli", "status", "--json",
                        "--state-dir", str(state)], capture_output=True, text=True, timeout=30,
                       check=False)
    return json.loads(r.stdout)


def test_disk_full_is_reported_and_nothing_is_lost_once_space_is_back(
        simulator, agent_process, tmp_path, small_disk):
    sim = simulator(vm_name=VM, rate_limit=None)
    out = tmp_path / "records.jsonl"
    agent = agent_process(sim.url, state_dir=small_disk, poll_interval=0.2, file_sink=out)
    try:
        assert agent.wait_for(lambda a: a.messages("heartbeat"), 15)
        filler = fill(small_disk)
        sim.set_events([{"EventId": "DF-1", "EventType": "Reboot", "Resources": [VM],
                         "NotBefore": time.time() + 900, "Description": "x" * 20_000}])
        assert agent.wait_for(lambda a: a.messages(
            "disk full: cannot persist records; will diff again at the next poll"), 10)
        time.sleep(6)  # several failed polls and one status.json write
        verdict = status(small_disk)
        assert verdict["state"] == "disk full", verdict
        assert any("failed commits" in p for p in verdict["problems"])
        assert len(agent.messages("disk full: cannot persist records; will diff again at the "
                                  "next poll")) == 1  # once a minute, not every poll
        assert agent.proc.poll() is None and not agent.records()
        os.unlink(filler)
        assert agent.wait_for(lambda a: a.records(), 10)
        assert agent.wait_for(lambda a: a.messages("state directory writable again"), 5)
    finally:
        assert agent.stop() == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["EventId"], r["Phase"]) for r in rows] == [("DF-1", "FirstSeen")]
