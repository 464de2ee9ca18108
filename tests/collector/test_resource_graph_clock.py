"""The Resource Graph channel in this process on a FakeClock: the real ``Collector`` with its
outbox, Log Analytics sink and ``azure-mgmt-resourcegraph`` client, against the Resource Graph
stand-in whose quota window runs on the same clock. Waiting for the quota's reset, for a 429's
``Retry-After`` and between passes happens in fake time, measured to the second; status.json
says what was counted."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.azure import AzureWorld, _toml
from helpers.collector import annotation, scheduled, vm_parent

from se_forwarder.collector.config import CollectorFileConfig
from se_forwarder.collector.service import Collector
from se_forwarder.collector.status import evaluate, read_snapshot
from se_forwarder.config import load
from se_forwarder_testbed.fakeclock import FakeClock
from se_forwarder_testbed.standins.resource_graph import ResourceGraphStandIn
from se_forwarder_testbed.standins.tls import generate

pytestmark = pytest.mark.e2e  # stand-ins over TLS in this process


def maintenance(n: int) -> list[dict]:
    out = []
    for i in range(n):
        info = scheduled(
            f"G{i:04d}", "Completed", "2026-01-01T00:00:00Z", parent=vm_parent(f"no-agent-{i % 40}")
        )["data"]["resourceInfo"]
        out.append({**info, "type": "microsoft.maintenance/scheduledevents"})
    return out


class GraphRun:
    """The collector's Resource Graph channel on a thread, as ``collect --resource-graph``."""

    def __init__(
        self,
        world: AzureWorld,
        arg: ResourceGraphStandIn,
        clock: FakeClock,
        state: Path,
        *,
        interval: float = 0.0,
        once: bool = False,
    ) -> None:
        cfg = {
            "agent": {"state_dir": str(state), "stop_flush_seconds": 5.0},
            "sinks": {"log_analytics": world.la_section()},
            "collector": {
                "resource_graph_endpoint": arg.endpoint,
                "resource_graph_ca_file": str(arg.tls.ca_cert),
                "resource_graph_interval": interval,
                "inventory_interval": 0,  # these count the maintenance tables' queries alone
            },
        }
        path = state.parent / "collector.toml"
        path.write_text(_toml(cfg))
        config = load(path, env={}, model=CollectorFileConfig)
        assert config.collector is not None
        self.clock, self.state = clock, state
        self.collector = Collector(config, config.collector, clock=clock)
        self.rc: int | None = None
        self.thread = threading.Thread(target=self._run, args=(once,), daemon=True)
        clock.track(self.thread)
        self.thread.start()

    def _run(self, once: bool) -> None:
        self.rc = self.collector.run_graph(once=once)

    def status(self) -> dict:
        return json.loads((self.state / "status.json").read_text())

    def stop(self) -> int:
        self.collector.stop.set()
        assert self.clock.run_until(lambda: not self.thread.is_alive(), 120)
        assert self.rc is not None
        return self.rc


@pytest.fixture
def world(tmp_path) -> Iterator[AzureWorld]:
    with AzureWorld(tmp_path, eventhubs=False) as w:
        yield w


@pytest.mark.tls
def test_a_pass_waits_for_the_quota_reset_in_fake_time(world, tmp_path):
    clock = FakeClock()
    with ResourceGraphStandIn(
        generate(tmp_path / "tls-arg"), world.authority, quota=2, window=10.0, clock=clock
    ) as arg:
        arg.tables["maintenanceresources"] = maintenance(1100)  # two pages
        ann = annotation("VirtualMachineHostCrashed", "no-agent-1", "2026-01-01T00:00:00Z")
        arg.tables["healthresources"] = [
            {**ann["data"]["resourceInfo"], "type": "microsoft.resourcehealth/resourceannotations"}
        ]
        start = clock.monotonic()
        run = GraphRun(world, arg, clock, tmp_path / "c", once=True)
        assert clock.run_until(lambda: not run.thread.is_alive(), 600)
        assert run.rc == 0
        # 2 queries used the window; the third waited for its reset (told as 00:00:11), no 429
        assert len(arg.requests) == 3 and arg.throttled == 0
        assert 11.0 <= clock.monotonic() - start < 12.0
        snap, problems = read_snapshot(run.status())
        assert problems == [] and snap.stopped and snap.channel == "resource-graph"
        assert (snap.graph_queries, snap.graph_throttled, snap.graph_passes) == (3, 1, 1)
        assert snap.committed == 1101 and snap.events == 1101 and snap.parse_failures == 0
        assert snap.last_pass_ok is True and snap.last_pass_at == clock.wall_seconds()
        assert len(world.la.records("Custom-ScheduledEventsPlatform")) == 1101


@pytest.mark.tls
def test_a_429_waits_its_retry_after_and_the_next_pass_writes_nothing_new(world, tmp_path):
    clock = FakeClock()
    with ResourceGraphStandIn(
        generate(tmp_path / "tls-arg"), world.authority, quota=3, window=20.0, clock=clock
    ) as arg:
        arg.tables["maintenanceresources"] = maintenance(5)
        arg.spend(3)  # another client of the identity used the window up
        start = clock.monotonic()
        run = GraphRun(world, arg, clock, tmp_path / "c", interval=600.0)
        assert clock.run_until(lambda: len(arg.requests) == 2, 120)  # both tables read
        assert arg.throttled == 1  # the 429 told Retry-After: 21 s
        assert 21.0 <= clock.monotonic() - start < 22.0
        clock.advance(600.0)  # the next pass, 10 minutes later
        assert clock.run_until(lambda: len(arg.requests) == 4, 60)
        clock.advance(6.0)  # status.json is written every 5 s
        snap, _ = read_snapshot(run.status())
        assert (snap.graph_passes, snap.committed, snap.duplicate_records) == (2, 5, 5)
        verdict = evaluate(snap, now=clock.wall_seconds(), process_alive=lambda _pid: True)
        assert verdict.state == "healthy", verdict
        assert run.stop() == 0


@pytest.mark.tls
def test_a_stop_during_a_throttled_wait_ends_the_run_at_once(world, tmp_path):
    clock = FakeClock()
    with ResourceGraphStandIn(
        generate(tmp_path / "tls-arg"), world.authority, quota=1, window=3600.0, clock=clock
    ) as arg:
        arg.tables["maintenanceresources"] = maintenance(3)
        arg.spend(1)
        run = GraphRun(world, arg, clock, tmp_path / "c", interval=600.0)
        clock.advance(30.0)  # waiting for a Retry-After of an hour
        assert run.thread.is_alive() and arg.requests == []
        before = clock.monotonic()
        assert run.stop() == 0
        assert clock.monotonic() - before < 5.0
        assert read_snapshot(run.status())[0].stopped
