"""Disk full: the agent keeps polling, says DISK FULL (with the count) where `status` reads it,
logs it once a minute rather than every poll, and records what changed once space is back.
A full or read-only state directory shows in `status` within a few seconds, with nothing to
commit, through the runtime copy of status.json (issue 18: HEALTHY for 25-35 s, then "hung or
not running", never DISK FULL). The state directory is a 2 MB tmpfs of its own, or an ext4 image
forced read-only (the test runs as root, as CI does); the agent runs in this process on the
FakeClock, so a minute of failed polls takes milliseconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

VM = "vm-disk"


@pytest.fixture
def small_disk(tmp_path):
    where = tmp_path / "state"
    where.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
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
    simulator, agent_run, clock, tmp_path, small_disk
):
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    out = tmp_path / "records.jsonl"
    agent = agent_run(sim.url, state_dir=small_disk, poll_interval=0.2, file_sink=out)
    assert agent.messages("heartbeat")
    filler = fill(small_disk)
    sim.set_events(
        [
            {
                "EventId": "DF-1",
                "EventType": "Reboot",
                "Resources": [VM],
                "NotBefore": clock.wall_seconds() + 900,
                "Description": "x" * 20_000,
            }
        ]
    )
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


def test_a_full_disk_shows_in_status_within_seconds_with_nothing_to_commit(
    simulator, agent_run, clock, tmp_path, small_disk
):
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    agent = agent_run(
        sim.url,
        state_dir=small_disk,
        poll_interval=1.0,
        agent_extra=f'runtime_dir = "{tmp_path / "run"}"',
    )
    clock.advance(6)
    assert agent.verdict().state == "healthy"
    fill(small_disk)  # nothing changes in the document: no commit will fail
    clock.advance(6)
    verdict = agent.verdict()
    assert verdict.state == "disk full", verdict
    assert any("No space left" in p for p in verdict.problems), verdict
    clock.advance(60)  # and it stays so: never "hung or not running"
    assert agent.verdict().state == "disk full"
    assert "DISK FULL" in agent.status_text()
    assert agent.stop() == 0


@pytest.fixture
def read_only_later(tmp_path):
    """An 8 MB ext4 file system (errors=remount-ro) and a function that forces it read-only
    the way the kernel does after an I/O error (writes on open files fail too)."""
    image, where = tmp_path / "ext4.img", tmp_path / "state"
    where.mkdir()
    subprocess.run(["truncate", "-s", "8M", str(image)], check=True)
    made = subprocess.run(
        ["mkfs.ext4", "-q", "-F", str(image)], capture_output=True, text=True, check=False
    )
    assert made.returncode == 0, f"needs mkfs.ext4: {made.stderr}"
    r = subprocess.run(
        ["mount", "-o", "loop,errors=remount-ro", str(image), str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, f"needs root and a loop device (CI runs as root): {r.stderr}"
    loop = subprocess.run(
        ["findmnt", "-n", "-o", "SOURCE", str(where)], capture_output=True, text=True, check=True
    ).stdout.strip()

    def force() -> None:
        Path(f"/sys/fs/ext4/{Path(loop).name}/trigger_fs_error").write_text("test\n")

    yield where, force
    subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_file_system_forced_read_only_shows_in_status_within_seconds(
    simulator, agent_run, clock, tmp_path, read_only_later
):
    where, force = read_only_later
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    agent = agent_run(
        sim.url,
        state_dir=where,
        poll_interval=1.0,
        agent_extra=f'runtime_dir = "{tmp_path / "run"}"',
    )
    clock.advance(6)
    assert agent.verdict().state == "healthy"
    force()
    with pytest.raises(OSError):
        (where / "probe").write_bytes(b"x")
    clock.advance(6)
    verdict = agent.verdict()
    assert verdict.state == "cannot persist", verdict
    assert any("Read-only file system" in p for p in verdict.problems), verdict
    clock.advance(60)
    assert agent.verdict().state == "cannot persist"
    assert agent.stop() == 0


# -- without a runtime copy: `status` looks at the file system itself (issue 33) ----------------


def status_json_cmd(state_dir) -> dict:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "se_forwarder.cli",
            "status",
            "--json",
            "--state-dir",
            str(state_dir),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    return json.loads(r.stdout)


@pytest.mark.process
def test_a_read_only_state_file_system_shows_in_status_at_once_without_a_runtime_copy(
    simulator, agent_run, clock, read_only_later
):
    """It said HEALTHY for 25 s (status.json, which the agent could not rewrite, not yet stale;
    only the sink's warning showed)."""
    where, force = read_only_later
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    agent = agent_run(sim.url, state_dir=where, poll_interval=1.0)
    clock.advance(6)
    assert agent.verdict().state == "healthy"
    force()
    clock.advance(1)  # status.json could not be rewritten: it still says all is well
    verdict = agent.verdict()
    assert verdict.state == "cannot persist", verdict
    assert any("file system is read-only" in p for p in verdict.problems), verdict
    out = status_json_cmd(where)
    assert out["state"] == "cannot persist" and out["status"]["read_only"] is True
    assert agent.stop() == 0


@pytest.mark.process
def test_a_full_state_file_system_says_disk_full_not_merely_stale(
    simulator, agent_run, clock, small_disk
):
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    agent = agent_run(sim.url, state_dir=small_disk, poll_interval=1.0)
    clock.advance(6)
    assert agent.verdict().state == "healthy"
    fill(small_disk)
    clock.advance(40)  # past status.json's staleness: still DISK FULL, not "hung"
    verdict = agent.verdict()
    assert verdict.state == "disk full", verdict
    out = status_json_cmd(small_disk)
    assert out["state"] == "disk full" and out["status"]["disk_full"] is True
    assert "DISK FULL" in agent.status_text()
    assert agent.stop() == 0
