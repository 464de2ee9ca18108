"""The demo fleet played: one IMDS simulator and one real agent (a thread of this process, the same
``Agent`` as ``se-forwarder run``) per VM that has the agent, each VM's sink reaching Log Analytics
through a network of its own (``network.Link``), what happens to the VMs themselves (reboots,
evictions, deletions, network cuts) at their scenario times, and ``se-forwarder collect
--resource-graph`` (the real ``Collector``) reading Azure's own record from the Resource Graph
stand-in. Everything runs on one ``ScaledClock``: scenario time everywhere.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from se_forwarder import logs
from se_forwarder.clock import SYSTEM
from se_forwarder.config import Config

from ..scaledclock import ScaledClock
from .fleet import Fleet, FleetVm
from .network import Link

# Scenario seconds between IMDS polls: 5 (a twelfth of a real second at speed 60) keeps each
# transition's uncertainty within the 10 s the fleet view asks of a "seen at once" hardware failure.
POLL = 5.0
HEARTBEAT = 300.0  # the agent's default
TAGS = ["service", "env", "team"]  # the report's Services section groups by `service`
GRAPH_INTERVAL = 60.0  # scenario seconds between the collector's Resource Graph passes
INVENTORY_INTERVAL = 300.0  # scenario seconds between its inventory passes (what exists)
BOOT_SECONDS = 60.0  # real seconds the agents may take to start, the scenario's clock held
REBOOT_WAIT_SECONDS = 60.0  # real seconds a rebooting VM's agent may take to stop
COLUMNS = (
    f"{'time':<8}  {'VM':<15} {'EventId':<8} {'EventType':<9} {'Source':<8} {'Phase':<9}  details"
)
RULE = "-" * 104

# The policy a scenario runs with: its hook prints one line and succeeds, then the agent approves.
HOOK = (
    "import os; print('demo hook: ready for', os.environ['SE_EVENT_TYPE'], "
    "os.environ['SE_EVENT_ID'], 'on', os.environ['SE_VM_NAME'])"
)
POLICIES = {
    "user-reboot-approved": {
        "hooks": {"prepare": {"command": [sys.executable, "-c", HOOK], "timeout": 30}},
        "rules": [
            {
                "name": "prepare, then approve",
                "affects_this_vm": True,
                "event_statuses": ["Scheduled"],
                "pre_hooks": ["prepare"],
                "approve": "after-hooks",
            }
        ],
    }
}


def dur(seconds: float, signed: bool = False) -> str:
    sign = "-" if seconds < 0 else ("+" if signed else "")
    s = abs(round(seconds))
    if s >= 3600:
        return f"{sign}{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{sign}{s // 60}m{s % 60:02d}s" if s >= 60 else f"{sign}{s}s"


class Retries(logging.Filter):
    """Counts, and keeps off the timeline, the delivery retries of VMs whose network the demo
    cut (one warning per attempt would bury the timeline; the summary gives the count)."""

    MESSAGES = ("delivery failed; will retry", "sink still sending at exit")

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith(self.MESSAGES):
            self.count += 1
            return False
        return True


@dataclass
class Machine:
    """One VM with the agent: its IMDS, its network, its agent's runs."""

    vm: FleetVm
    sim: Any  # simulator.server.Simulator
    config: Config
    link: Link | None
    runs: list[tuple[Any, threading.Thread]] = field(default_factory=list)  # (Agent, thread)


class Play:
    def __init__(
        self,
        fleet: Fleet,
        base: Path,
        out: TextIO,
        clock: ScaledClock,
        authority: Any,
        standin: Any = None,
        graph: Any = None,
    ) -> None:
        self.fleet, self.base, self.out, self.clock = fleet, base, out, clock
        self.authority, self.standin, self.graph = authority, standin, graph
        self.machines: list[Machine] = []
        self.collector: Any = None
        self._identity: Any = None  # the collector's IMDS (its managed identity's tokens)
        self.graph_tables: Any = (
            None  # platform.LiveTables, what the Resource Graph stand-in serves
        )
        self._collector_thread: threading.Thread | None = None
        self._print = threading.Lock()
        self._last_line = time.monotonic()
        self.origin_ms = 0
        self.retries = Retries()
        self._reboots: list[threading.Thread] = []
        if any(o.kind in ("network", "gone") for vm in fleet.vms for o in vm.outages):
            for handler in logging.getLogger(logs.LOGGER_NAME).handlers:
                handler.addFilter(self.retries)

    # -- setting up ---------------------------------------------------------------------------

    def start(self) -> None:
        """Every simulator on one scenario origin, then the agents and the collector."""
        from ..simulator.server import Simulator

        self.clock.hold()  # scenario time waits until every agent polls (a boot takes real time)
        try:
            self.origin_ms = self.clock.wall_ms()
            for vm in self.fleet.vms:
                if vm.agent:
                    sim = Simulator(
                        self.fleet.scenario(vm), clock=self.clock, token_authority=self.authority
                    ).start()
                    link = Link(self.standin.port) if self.standin is not None else None
                    self.machines.append(Machine(vm, sim, self._config(vm, sim.url, link), link))
            if self.graph is not None:
                self._identity = Simulator(
                    clock=self.clock, token_authority=self.authority, vm_name="collector"
                ).start()
            for m in self.machines:
                self._boot(m)
            deadline = time.monotonic() + BOOT_SECONDS
            while time.monotonic() < deadline and not all(
                any("/scheduledevents" in r.path for r in m.sim.requests) for m in self.machines
            ):
                time.sleep(0.02)
        finally:
            self.clock.release()
        if self.graph is not None:
            self._start_collector()

    def _config(self, vm: FleetVm, imds_url: str, link: Link | None) -> Config:
        if self.fleet.name in POLICIES:  # show what the agent does (hooks, approval) too
            logging.getLogger(logs.LOGGER_NAME + ".actions").setLevel(logging.INFO)
        folder = self.base / "vms" / vm.name
        data: dict[str, Any] = {
            "agent": {
                "state_dir": str(folder / "state"),
                "poll_interval": POLL,
                "heartbeat_interval": HEARTBEAT,
                "log_format": "text",
                "log_level": "warning",
                "stop_flush_seconds": 60,
                "tags": TAGS,
            },
            # the agent's IMDS deadlines run on its clock: 2 s and 120 s of real time, so a busy
            # machine answering in 50 ms does not look like an IMDS timing out (2 s / speed)
            "imds": {
                "endpoint": imds_url,
                "timeout": 2.0 * self.clock.speed,
                "first_call_timeout": 120.0 * self.clock.speed,
            },
            "sinks": {
                "file": {
                    "path": str(folder / "records.jsonl"),
                    "heartbeat_path": str(folder / "heartbeats.jsonl"),
                }
            },
            "policy": POLICIES.get(self.fleet.name, {}),
        }
        if link is not None:
            data["identity"] = {"token_endpoint": imds_url}  # the VM's IMDS gives its tokens
            data["sinks"]["log_analytics"] = {
                "endpoint": f"https://localhost:{link.port}",
                "dcr_immutable_id": self.standin.dcr_id,
                "ca_file": str(self.standin.ca_cert),
            }
        return Config.model_validate(data)

    def _boot(self, m: Machine) -> None:
        from se_forwarder.agent import Agent
        from se_forwarder.sinks import registry
        from se_forwarder.sinks.base import SinkContext

        # The stand-ins answer in real time under the sped-up clock: the sinks' network deadlines
        # are real seconds (as the IMDS timeouts are scaled above), as they were before.
        cx = SinkContext.of(m.config, SYSTEM)
        agent = Agent(
            m.config,
            registry.build(m.config.sinks, cx),
            stop=self.clock.event(),
            clock=self.clock,
            on_records=self._timeline,
        )
        thread = threading.Thread(target=agent.run, name=f"agent-{m.vm.name}", daemon=True)
        thread.start()
        m.runs.append((agent, thread))

    def _start_collector(self) -> None:
        from se_forwarder.collector.config import CollectorConfig
        from se_forwarder.collector.service import Collector

        folder = self.base / "collector"
        config = Config.model_validate(
            {
                "agent": {
                    "state_dir": str(folder / "state"),
                    "log_format": "text",
                    "log_level": "warning",
                    "stop_flush_seconds": 60,
                },
                "identity": {"token_endpoint": self._identity.url},
                "sinks": {
                    "log_analytics": {
                        "endpoint": self.standin.endpoint,
                        "dcr_immutable_id": self.standin.dcr_id,
                        "ca_file": str(self.standin.ca_cert),
                    }
                },
            }
        )
        cfg = CollectorConfig(
            resource_graph_endpoint=self.graph.endpoint,
            resource_graph_ca_file=self.graph.tls.ca_cert,
            resource_graph_interval=GRAPH_INTERVAL,
            inventory_interval=INVENTORY_INTERVAL,
        )
        self.collector = Collector(config, cfg, clock=self.clock, peer_clock=SYSTEM)
        self._collector_thread = threading.Thread(
            target=self.collector.run_graph, name="collector", daemon=True
        )
        self._collector_thread.start()

    # -- playing ------------------------------------------------------------------------------

    def scenario_time(self) -> float:
        return (self.clock.wall_ms() - self.origin_ms) / 1000

    def wall_ms(self, scenario_seconds: float) -> int:
        return self.origin_ms + int(scenario_seconds * 1000)

    def approvals(self) -> dict[str, float]:
        """EventId → scenario time of its first approval, over every VM's IMDS."""
        out: dict[str, float] = {}
        for m in self.machines:
            for eid, wall in m.sim.approvals.items():
                at = wall - m.sim.wall_time_of(0)
                out[eid] = min(at, out.get(eid, at))
        return out

    def run(self, progress_every: float = 10.0) -> None:
        """Until the fleet's end: the VMs' outages at their times, a progress line when quiet."""
        happenings = sorted(self._happenings(), key=lambda h: h[0])
        end = self.fleet.end
        while (t := self.scenario_time()) < end:
            while happenings and happenings[0][0] <= t:
                happenings.pop(0)[1]()
            if time.monotonic() - self._last_line >= progress_every:
                self.say(f"… scenario at {dur(t)} of {dur(end)}")
            time.sleep(0.02)

    def _happenings(self) -> list[tuple[float, Callable[[], None]]]:
        out: list[tuple[float, Callable[[], None]]] = []
        for m in self.machines:
            for o in m.vm.outages:
                if o.kind == "network" and m.link is not None:
                    out.append((o.at, partial(self._network_down, m, m.link, o.note)))
                    if o.until is not None:
                        out.append((o.until, partial(self._network_back, m, m.link)))
                elif o.kind == "reboot":
                    out.append((o.at, partial(self._rebooting, m, o.note)))
                    if o.until is not None:
                        out.append((o.until, partial(self._back, m)))
                elif o.kind == "gone":
                    out.append((o.at, partial(self._gone, m, o.note)))
        return out

    def _network_down(self, m: Machine, link: Link, note: str) -> None:
        link.cut()
        self.say(note or "network down: what its agent commits waits in its spool", m.vm.name)

    def _network_back(self, m: Machine, link: Link) -> None:
        link.restore()
        self.say("network back: the spool is delivered", m.vm.name)

    def _rebooting(self, m: Machine, note: str) -> None:
        self.say(note or "VM rebooting: its agent stops with the guest", m.vm.name)
        self._stop(m)

    def _back(self, m: Machine) -> None:
        self.say("VM back: its agent starts again on its state", m.vm.name)
        self._reboot(m)

    def _gone(self, m: Machine, note: str) -> None:
        self.say(note or "VM gone (evicted or deleted): nothing more leaves it", m.vm.name)
        if m.link:
            m.link.cut()
        self._stop(m)

    def _reboot(self, m: Machine) -> None:
        """Boot the VM's agent again once its previous run has let go of its state directory,
        without holding up the other VMs' happenings. A reboot ends the agent's process; here the
        run is a thread, and a delivery worker still retrying its sink (the VM's network is cut)
        keeps the state directory after the run has ended, until it gives up and the store is
        closed, as the end of the process would."""
        from se_forwarder.errors import StateError

        previous = m.runs[-1] if m.runs else None

        def boot() -> None:
            deadline = time.monotonic() + REBOOT_WAIT_SECONDS
            if previous is not None:  # what the end of the guest's process does
                agent, thread = previous
                thread.join(REBOOT_WAIT_SECONDS)
                while agent.delivery.alive() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not agent.delivery.alive():
                    agent.store.close()
            while True:
                try:
                    self._boot(m)
                    return
                except StateError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

        thread = threading.Thread(target=boot, name=f"reboot-{m.vm.name}", daemon=True)
        self._reboots.append(thread)
        thread.start()

    def _stop(self, m: Machine) -> None:
        if m.runs:
            m.runs[-1][0].request_stop()

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop every agent (as a service stop) and the collector; True if all stopped."""
        deadline = time.monotonic() + timeout
        for t in self._reboots:  # an agent booting again is stopped with the others
            t.join(max(0.0, deadline - time.monotonic()))
        for m in self.machines:
            self._stop(m)
        if self.collector is not None:
            self.collector.stop.set()
        threads = [t for m in self.machines for _, t in m.runs]
        if self._collector_thread is not None:
            threads.append(self._collector_thread)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)

    def close(self) -> None:
        for m in self.machines:
            m.sim.stop()
            if m.link is not None:
                m.link.close()
        if self._identity is not None:
            self._identity.stop()

    # -- the timeline -------------------------------------------------------------------------

    def clock_text(self, wall_seconds: float | None = None) -> str:
        t = self.clock.wall_seconds() if wall_seconds is None else wall_seconds
        return time.strftime("%H:%M:%S", time.gmtime(t))

    def say(self, text: str, vm: str = "") -> None:
        with self._print:
            print(
                f"{self.clock_text()}  {vm:<15} {text}" if vm else f"{self.clock_text()}  {text}",
                file=self.out,
                flush=True,
            )
            self._last_line = time.monotonic()

    def _timeline(self, records: list[Any]) -> None:
        with self._print:
            for r in records:  # at the record's own time: the terminal says what it says
                print(
                    f"{r.TimeGenerated[11:19]}  {(r.VmName or '-')[:15]:<15} {r.EventId[:8]:<8} "
                    f"{r.EventType:<9} {(r.EventSource or '-'):<8} {r.Phase:<9}  {details(r)}",
                    file=self.out,
                    flush=True,
                )
            self._last_line = time.monotonic()


def details(r: Any) -> str:
    parts = []
    if r.Phase in ("FirstSeen", "Updated") and r.NoticeSeconds is not None:
        parts.append(f"notice {dur(r.NoticeSeconds)}")
    if r.Phase == "Started":
        parts.append(
            "no notice (appeared Started)"
            if r.StartDelaySeconds is None and r.SinceFirstSeenSeconds == 0
            else f"start delay {dur(r.StartDelaySeconds, signed=True)}"
            if r.StartDelaySeconds is not None
            else "started"
        )
    if r.Phase == "Removed":  # one spelling, Azure's, as the report shows (records: Cancelled)
        parts.append("Canceled" if r.Outcome == "Cancelled" else r.Outcome or "")
        if r.SinceStartedSeconds is not None:
            parts.append(f"impact window {dur(r.SinceStartedSeconds)}")
    parts.append("this VM" if r.AffectsThisVm else "other VMs: " + ",".join(r.Resources))
    return " · ".join(p for p in parts if p)
