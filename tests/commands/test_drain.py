"""``se-forwarder drain`` against the real agent and its file sink: it waits while a sink cannot
deliver (progress with the sink's error, exit 1 at the deadline), says when the agent is gone with
records in its spool, and exits 0 once every sink has caught up, or at once for an agent that
stopped cleanly with nothing left."""

from __future__ import annotations

import argparse
import json
import subprocess
import threading
import time

import pytest

from se_forwarder.commands import drain as drain_command
from se_forwarder_testbed.agentproc import AgentProcess, se_forwarder_cmd, write_config
from se_forwarder_testbed.fakeclock import FakeClock

pytestmark = [pytest.mark.e2e, pytest.mark.process]

EID = "C7061BAC-AFDC-4513-B24B-AA5F13A16123"


def drain(state, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*se_forwarder_cmd(), "drain", "--state-dir", str(state), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def drain_in_process(state, *args: str) -> int:
    """`se-forwarder drain` in this process on a fake clock: its waits (the restart grace) are
    played, not slept; what it reads (status.json, whether the agent's process lives) is real.
    Its output is the test's (capsys)."""
    parser = argparse.ArgumentParser()
    drain_command.configure(parser)
    args_ = parser.parse_args(["--state-dir", str(state), *args])
    clock = FakeClock(start_ms=int(time.time() * 1000))  # status.json's times are real ones
    codes: list[int] = []
    thread = threading.Thread(
        target=lambda: codes.append(drain_command.run(args_, clock)), name="drain", daemon=True
    )
    clock.track(thread)
    thread.start()
    clock.run_until(lambda: not thread.is_alive(), within=600)
    thread.join(60)
    assert codes, "drain did not end"
    return codes[0]


def file_sink(state) -> dict:
    try:
        return json.loads((state / "status.json").read_text())["sinks"]["file"]
    except (FileNotFoundError, ValueError, KeyError):
        return {}


def test_drain_waits_for_every_sink_and_says_when_it_cannot(simulator, tmp_path, capsys):
    sim = simulator(vm_name="WestNO_0")
    state = tmp_path / "state"
    blocked = tmp_path / "out"
    blocked.write_text("a file where the sink wants a directory")
    records = blocked / "records.jsonl"
    cfg = write_config(tmp_path / "c.toml", sim.url, state, file_sink=records)
    sim.set_events(
        [
            {
                "EventId": EID,
                "EventType": "Freeze",
                "EventStatus": "Scheduled",
                "Resources": ["WestNO_0"],
                "NotBefore": time.time() + 600,
                "DurationInSeconds": 5,
            }
        ]
    )

    agent = AgentProcess(cfg)
    try:
        deadline = time.monotonic() + 30  # FirstSeen spooled, the sink failing
        while not file_sink(state).get("last_error") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert file_sink(state)["spool_depth"] >= 1, agent.raw[-5:]

        # the sink cannot write: progress names it, the deadline ends the wait with exit 1
        r = drain(state, "--timeout", "3", "--interval", "1")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "not drained within 3s" in r.stderr and "record(s) still in the spool" in r.stderr
        assert "record(s) in the spool (file " in r.stdout and "cannot write" in r.stdout, r.stdout

        # killed with records in its spool: nothing can drain them until it starts again
        agent.kill9()
        capsys.readouterr()
        code = drain_in_process(state, "--timeout", "30", "--json")
        out, err = capsys.readouterr()
        assert code == 1, out + err
        doc = json.loads(out)
        assert doc["drained"] is False and "not running" in doc["message"]
        # (after the grace a restarting agent gets)
        assert doc["spool_depth"] >= 1 and 9 <= doc["waited_seconds"] < 25

        # the sink can write again: the next agent delivers the spool, drain sees it empty
        blocked.unlink()
        blocked.mkdir()
        agent = AgentProcess(cfg)
        r = drain(state, "--timeout", "90", "--interval", "1")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "spool empty: every sink delivered what it held" in r.stdout
        delivered = [json.loads(line) for line in records.read_text().splitlines()]
        assert EID in {d.get("EventId") for d in delivered}
    finally:
        rc = agent.stop()
    assert rc == 0

    # stopped cleanly, nothing left: drained at once
    r = drain(state, "--timeout", "30")
    assert r.returncode == 0 and "spool empty" in r.stdout, r.stdout + r.stderr


def test_drain_without_a_status_file_is_a_usage_error(tmp_path):
    r = drain(tmp_path, "--timeout", "1")
    assert r.returncode == 2 and "no status.json in" in r.stderr, r.stderr
