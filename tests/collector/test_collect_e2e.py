"""``se-forwarder collect`` as a process: the real EventHubConsumerClient against the Event Hubs
stand-in, checkpoints in Azurite through the managed-identity token, rows into the Logs
Ingestion stand-in; and kill -9 at random moments with events flowing."""

from __future__ import annotations

import contextlib
import io
import json
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from helpers.collector import HUB, CollectorWorld, annotation, scheduled, vm_parent

from se_forwarder import cli
from se_forwarder_testbed.agentproc import se_forwarder_cmd

pytestmark = [pytest.mark.e2e, pytest.mark.tls]


@pytest.fixture
def world(tmp_path) -> Iterator[CollectorWorld]:
    with CollectorWorld(tmp_path) as w:
        yield w
        assert w.hub.errors == []


def wait_rows(world: CollectorWorld, n: int, timeout: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = world.platform_rows()
        if len({r["RecordId"] for r in rows}) >= n:
            return rows
        time.sleep(0.2)
    raise AssertionError(f"{len(world.platform_rows())} rows of {n} within {timeout} s")


def status(state_dir) -> tuple[int, dict]:
    """``se-forwarder status --json`` on the collector's state directory: exit code, verdict."""
    done = subprocess.run(
        [*se_forwarder_cmd(), "status", "--state-dir", str(state_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, json.loads(done.stdout)


def status_here(state_dir) -> tuple[int, dict]:
    """``status()`` through the command's own entry point (``cli.main``) in this process: the
    same code and answer without a new interpreter's start-up (about 0.3 s of CPU each), for the
    polls that wait for an answer; the answer waited for is then the command's (``status()``)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main(["status", "--state-dir", str(state_dir), "--json"])
    return rc, json.loads(out.getvalue())


def until_status(state_dir, ready, timeout: float, every: float = 0.5) -> tuple[float, int, dict]:
    """Seconds until ``se-forwarder status --json`` (the command, as a process) answers what
    ``ready(rc, answer)`` accepts, with that exit code and answer; polled in this process
    (``status_here``) and confirmed by the command. After ``timeout``, the command's answer as
    it is."""
    t0 = time.monotonic()
    while True:
        late = time.monotonic() - t0 > timeout
        if late or ready(*status_here(state_dir)):
            rc, out = status(state_dir)
            if late or ready(rc, out):
                return time.monotonic() - t0, rc, out
        time.sleep(every)


def wait_status(state_dir, ready, timeout: float = 30.0) -> tuple[int, dict]:
    """Until status.json (written every 5 s) satisfies ``ready``."""
    _, rc, out = until_status(state_dir, lambda _rc, o: ready(o["status"]), timeout, every=1.0)
    return rc, out


def stop(proc) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(30)


@pytest.mark.process
def test_collect_fills_the_platform_table(world, tmp_path):
    vmss = (
        "/subscriptions/00000000-0000-0000-0000-0000000000aa/resourceGroups/RG-Scale/providers/"
        "Microsoft.Compute/virtualMachineScaleSets/web"
    )
    first = scheduled("E1", "Scheduled", "2026-01-01T10:00:00.1234567Z")
    world.publish(first, scheduled("E1", "Started", "2026-01-01T10:05:00Z"))
    world.publish(first)  # Event Grid delivered it twice: same id
    world.publish(
        scheduled(
            "E2",
            "Completed",
            "2026-01-01T11:00:00Z",
            cloud=True,
            spelling="microsoft.maintenance/scheduledevents/write",
        ),
        array=False,
    )
    world.publish(
        scheduled(
            "E3",
            "Scheduled",
            "2026-01-01T12:00:00Z",
            parent=vmss,
            resources=["web_0", "web_3"],
            event_type="Freeze",
        )
    )
    world.publish(
        annotation(
            "LiveMigrationSucceeded", "vm-1", "2026-01-01T12:01:00Z", impact="Downtime Freeze"
        ),
        annotation(
            "VirtualMachinePossiblyDegradedDueToHardwareFailure",
            "vm-2",
            "2026-01-01T12:02:00Z",
            impact="Degraded",
            start="2026-01-01T12:02:00Z",
            end="2026-01-03T12:02:00Z",
        ),
    )
    world.hub.inject("platform-events", "not json")  # one readable line, counted, skipped
    proc = world.start_collector(world.collector_config(tmp_path / "c"))
    try:
        rows = wait_rows(world, 7)
        # `status` reads the collector's own status.json: its counters, healthy, exit 0
        rc, out = wait_status(tmp_path / "c", lambda s: s.get("delivered") == 7)
        st = out["status"]
        assert (rc, out["state"], out["problems"]) == (0, "healthy", []), out
        assert st["role"] == "collector" and st["channel"] == "event-hub"
        assert (
            st["committed"],
            st["duplicate_notifications"],
            st["parse_failures"],
            st["expanded_events"],
            st["events"],
        ) == (7, 1, 1, 1, 8)
        assert sum(p["owned"] for p in st["partitions"].values()) == 2
        assert "1 unreadable event(s) skipped (see the log)" in out["warnings"]
    finally:
        assert stop(proc) == 0
    rc, out = status(tmp_path / "c")  # a clean stop is recorded: not healthy any more
    assert rc == 1 and out["state"] == "stopped" and out["status"]["stopped"] is True
    assert len(rows) == 7  # the duplicate notification was dropped before the outbox
    by = {(r["EventId"] or r["AnnotationName"], r["VmName"], r["EventStatus"]): r for r in rows}
    assert set(by) == {
        ("E1", "vm-1", "Scheduled"),
        ("E1", "vm-1", "Started"),
        ("E2", "vm-1", "Completed"),
        ("E3", "web_0", "Scheduled"),
        ("E3", "web_3", "Scheduled"),
        ("LiveMigrationSucceeded", "vm-1", None),
        ("VirtualMachinePossiblyDegradedDueToHardwareFailure", "vm-2", None),
    }
    e3 = by[("E3", "web_0", "Scheduled")]
    assert e3["VmResourceId"] == (
        "/subscriptions/00000000-0000-0000-0000-0000000000aa/resourcegroups/"
        "rg-scale/providers/microsoft.compute/virtualmachines/web_0"
    )
    assert e3["ScaleSetName"] == "web" and e3["EventType"] == "Freeze"
    assert by[("E1", "vm-1", "Scheduled")]["TimeGenerated"] == "2026-01-01T10:00:00.123Z"
    assert by[("E1", "vm-1", "Scheduled")]["NotBefore"] == "2025-09-19T18:29:47.000Z"
    assert by[("E1", "vm-1", "Started")]["NotBefore"] is None
    freeze = by[("LiveMigrationSucceeded", "vm-1", None)]
    degraded = by[("VirtualMachinePossiblyDegradedDueToHardwareFailure", "vm-2", None)]
    assert freeze["ImpactType"] == "Downtime Freeze" and freeze["ImpactStartTime"] is None
    assert degraded["ImpactEndTime"] == "2026-01-03T12:02:00.000Z"
    assert {r["Channel"] for r in rows} == {"event-grid"}
    # checkpoints are in Azurite: a second run reads nothing again, only what came after them. An
    # event after each partition's checkpoint tells when it has read (what it read again would
    # reach the table before them, in the partition's order), rather than waiting a while.
    proc = world.start_collector(world.collector_config(tmp_path / "c2"))
    try:
        for partition, eid in enumerate(("E8", "E9")):
            world.hub.inject(
                HUB,
                json.dumps([scheduled(eid, "Scheduled", "2026-01-01T13:00:00Z")]),
                partition=partition,
            )
        wait_rows(world, 9)
    finally:
        assert stop(proc) == 0
    again = world.platform_rows()
    assert len(again) == 9 and {r["EventId"] for r in again} - {r["EventId"] for r in rows} == {
        "E8",
        "E9",
    }
    assert "unreadable platform message skipped; kept aside" in (tmp_path / "c.log").read_text()


def test_kill_9_at_random_moments_loses_nothing(world, tmp_path):
    """Events keep flowing while the collector is killed -9 three times: every status arrives
    in the table, each notification is committed once (duplicates in the table come only from
    a delivery repeated after a kill, and share their RecordId)."""
    rng = random.Random(21)
    total = 240
    expected: set[tuple[str, str]] = set()
    done = threading.Event()

    def publish() -> None:
        for i in range(total // 2):
            eid = f"EV{i:04d}"
            vm = f"vm-{i % 7}"
            a = scheduled(
                eid, "Scheduled", f"2026-02-01T00:{i // 60:02d}:{i % 60:02d}Z", parent=vm_parent(vm)
            )
            b = scheduled(
                eid, "Completed", f"2026-02-01T01:{i // 60:02d}:{i % 60:02d}Z", parent=vm_parent(vm)
            )
            world.publish(a, b) if i % 2 else world.publish(b, a, array=False)
            if i % 9 == 0:
                world.publish(a)  # a duplicate delivery now and then
            expected.update({(eid, "Scheduled"), (eid, "Completed")})
            time.sleep(0.03)
        done.set()

    config = world.collector_config(tmp_path / "c")
    publisher = threading.Thread(target=publish, daemon=True)
    publisher.start()
    kills = 0
    while kills < 3:
        proc = world.start_collector(config)
        time.sleep(rng.uniform(2.5, 6.0))
        proc.kill()  # SIGKILL
        proc.wait(10)
        kills += 1
    publisher.join(60)
    assert done.is_set()
    since = world.log_size(config)
    proc = world.start_collector(config)
    try:
        rows = wait_rows(world, total, timeout=90)
        world.wait_started(config, since)
    finally:
        assert stop(proc) == 0
    got = {(r["EventId"], r["EventStatus"]) for r in rows}
    assert got == expected
    per_record = Counter(r["RecordId"] for r in rows)
    assert len(per_record) == total
    by_record = {}
    for r in rows:  # a repeated delivery repeats the same row, never a different one
        assert by_record.setdefault(r["RecordId"], r) == r
