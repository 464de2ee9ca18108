"""The agent: poll IMDS, record changes durably, let the sinks drain, report its own health.

The poll loop is the only hot path: an unchanged answer costs one HTTP request and a byte
comparison. Everything else (heartbeats, status file, checkpoints, instance refresh) runs on a
coarse schedule from the same loop, so the agent is one thread plus one per sink.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from . import __version__, logs, tracker
from .config import Config
from .delivery import DeadLetters, DeliveryWorker
from .imds.client import ImdsClient, ImdsError, backoff_delay
from .imds.instance import identity_from_instance
from .recorder import Recorder
from .records import Heartbeat, LifecycleRecord, VmIdentity
from .sinks.base import Sink
from .store import Store
from .timefmt import format_ms

STATUS_EVERY = 5.0  # seconds between status.json writes
CHECKPOINT_EVERY = 30.0  # seconds between saves of the last successful poll time
IDENTITY_WAIT_SECONDS = 30.0  # at start, before polling without the instance document
IDENTITY_RETRY_SECONDS = 60.0  # then, how often to ask for it again


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Agent:
    def __init__(self, config: Config, sinks: list[Sink], *, stop: threading.Event | None = None,
                 on_records: Callable[[list[LifecycleRecord]], None] | None = None) -> None:
        self.config = config
        self.stop = stop or threading.Event()
        self.log = logs.get("agent")
        self.state_dir = Path(config.agent.state_dir)
        self.store, recovered = Store.open_or_recover(self.state_dir, max_bytes=config.spool.max_bytes)
        if recovered:
            logs.event(self.log, logging.CRITICAL, recovered, state_dir=str(self.state_dir))
        self.sinks = sinks
        self._user_on_records = on_records
        self.client = ImdsClient(
            config.imds.endpoint, api_version=config.imds.api_version, timeout=config.imds.timeout,
            first_call_timeout=config.imds.first_call_timeout,
            max_requests_per_second=config.imds.max_requests_per_second, stop=self.stop)
        self.workers_stop = threading.Event()
        dead = DeadLetters(self.state_dir / "dead-letter.jsonl")
        self.workers = [DeliveryWorker(s, self.store, dead, stop=self.workers_stop) for s in sinks]
        self.started = time.time()
        self._started_mono = time.monotonic()
        self._last_at = 0  # wall-clock time of the last poll, ms: never goes backwards
        self.recorder: Recorder | None = None
        self.vm = VmIdentity()
        self.last_latency_ms: float | None = None
        self.last_poll_at: float | None = None
        self._dropped_at_start = self.store.counter("dropped")

    # -- lifecycle ----------------------------------------------------------------------------

    def run(self) -> int:
        gone = self.store.register_sinks(s.name for s in self.sinks)
        for name in gone:
            logs.event(self.log, logging.WARNING, "sink no longer configured; its backlog is released",
                       sink=name)
        for w in self.workers:
            w.start()
        logs.event(self.log, logging.INFO, "agent starting", version=__version__,
                   endpoint=self.config.imds.endpoint, api_version=self.config.imds.api_version,
                   sinks=[s.name for s in self.sinks], state_dir=str(self.state_dir))
        try:
            self.vm = self._read_identity(IDENTITY_WAIT_SECONDS)
            if self.stop.is_set():
                return 0
            self.recorder = Recorder(self.store, self.vm, on_records=self._on_records)
            self._heartbeat("start")
            self._loop()
        finally:
            self._shutdown()
        return 0

    def _loop(self) -> None:
        assert self.recorder is not None
        interval = self.config.agent.poll_interval
        hb_every = self.config.agent.heartbeat_interval
        refresh_every = self.config.imds.instance_refresh_seconds
        mono = time.monotonic
        next_poll = mono()
        next_hb = next_poll + hb_every
        next_status = next_poll
        next_checkpoint = next_poll + CHECKPOINT_EVERY
        next_refresh = next_poll + (refresh_every if self.vm.VmId else IDENTITY_RETRY_SECONDS)
        while not self.stop.is_set():
            self._poll()
            t = mono()
            if t >= next_status:
                self.write_status()
                next_status = t + STATUS_EVERY
            if t >= next_hb:
                self._heartbeat("periodic")
                next_hb = t + hb_every
            if t >= next_checkpoint:
                self.recorder.checkpoint()
                next_checkpoint = t + CHECKPOINT_EVERY
            if t >= next_refresh:
                self._refresh_identity()
                next_refresh = t + (refresh_every if self.vm.VmId else IDENTITY_RETRY_SECONDS)
            next_poll += interval
            if next_poll < t:  # fell behind (a slow answer): don't burst to catch up
                next_poll = t + interval
            self.stop.wait(next_poll - t)

    def _poll(self) -> None:
        rec = self.recorder
        assert rec is not None
        answer = self.client.scheduled_events()
        if answer.error is not None and self.stop.is_set():
            return  # interrupted by the stop request: not an observation
        at = self._poll_time()
        self.last_poll_at = at / 1000
        self.last_latency_ms = answer.latency_ms
        if answer.error is not None:
            rec.bad(at, answer.describe())
        else:
            rec.answer(at, answer.status or 0, answer.body)


    def _poll_time(self) -> int:
        """Wall-clock time of this poll, never earlier than the last one: a clock stepped back
        (NTP, a host resync) must not give negative deltas or reorder a VM's records."""
        at = now_ms()
        if at < self._last_at:
            if self._last_at - at > 1000:
                logs.event(self.log, logging.WARNING, "wall clock went backwards; holding time",
                           by_seconds=round((self._last_at - at) / 1000, 3))
            at = self._last_at
        self._last_at = at
        return at

    def request_stop(self) -> None:
        """From a signal handler: stop, and cut a blocking IMDS call short (the first one may
        otherwise wait 120 s, longer than the service manager's stop timeout)."""
        self.stop.set()
        self.client.abort()

    def _shutdown(self) -> None:
        try:
            if self.recorder is not None:
                self.recorder.checkpoint()
                self._heartbeat("stop")
            # Let the sinks send what is waiting, briefly, then stop them.
            for w in self.workers:
                w.draining.set()
                w.notify()
            deadline = time.monotonic() + self.config.agent.stop_flush_seconds
            for w in self.workers:
                w.join(max(0.0, deadline - time.monotonic()))
            self.workers_stop.set()
            for w in self.workers:
                w.notify()
                w.join(2.0)
            busy = [w.sink.name for w in self.workers if w.is_alive()]
            if busy:
                logs.event(self.log, logging.WARNING, "sink still sending at exit; its records stay "
                           "in the outbox and are sent again at the next start", sinks=busy)
            self.write_status(stopped=True)
        finally:
            self.client.close()
            if not any(w.is_alive() for w in self.workers):  # a live worker still holds the store
                self.store.close()
            logs.event(self.log, logging.INFO, "agent stopped", polls=self._polls())

    # -- identity -----------------------------------------------------------------------------

    def _read_identity(self, wait: float) -> VmIdentity:
        """Read the instance document, retrying for up to ``wait`` seconds: every record carries
        it. Then poll without it rather than miss events (a Spot eviction gives 30 s); the
        identity columns fill in when it answers (retried every minute)."""
        attempt = 0
        deadline = time.monotonic() + wait
        while not self.stop.is_set():
            try:
                return identity_from_instance(self.client.instance())
            except ImdsError as exc:
                delay = min(60.0, backoff_delay(attempt, base=1.0, cap=60.0) + 1.0)
                if time.monotonic() + delay > deadline:
                    logs.event(self.log, logging.ERROR, "instance document unavailable; polling "
                               "without it (VM identity columns null until it answers)", error=str(exc))
                    break
                logs.event(self.log, logging.WARNING, "instance document unavailable; retrying",
                           error=str(exc), retry_in=round(delay, 1))
                attempt += 1
                self.stop.wait(delay)
        return identity_from_instance({})

    def _refresh_identity(self) -> None:
        try:
            vm = identity_from_instance(self.client.instance())
        except ImdsError as exc:
            logs.event(self.log, logging.WARNING, "instance document refresh failed", error=str(exc))
            return
        if vm != self.vm and self.recorder is not None:
            logs.event(self.log, logging.INFO, "VM identity changed", VmName=vm.VmName, Zone=vm.Zone)
            self.vm = self.recorder.vm = vm

    # -- records, heartbeats, status ----------------------------------------------------------

    def _on_records(self, records: list[LifecycleRecord]) -> None:
        for w in self.workers:
            w.notify()
        if self._user_on_records is not None:
            self._user_on_records(records)

    def _polls(self) -> int:
        return self.recorder.stats.polls if self.recorder else 0

    def _totals(self) -> dict[str, int]:
        stats = [w.stats for w in self.workers]
        return {"delivered": sum(s.delivered for s in stats), "failed": sum(s.failed for s in stats),
                "dead_lettered": sum(s.dead_lettered for s in stats),
                "dropped": self.store.counter("dropped") - self._dropped_at_start}

    def build_heartbeat(self, reason: str) -> Heartbeat:
        rec = self.recorder
        state = rec.state if rec else tracker.TrackerState()
        vm = self.vm
        depths = self.store.depths()
        totals = self._totals()
        return Heartbeat(
            TimeGenerated=format_ms(now_ms()), RecordId=str(uuid.uuid4()), Reason=reason,
            Computer=vm.Computer, VmName=vm.VmName, VmId=vm.VmId, VmResourceId=vm.VmResourceId,
            SubscriptionId=vm.SubscriptionId, ResourceGroup=vm.ResourceGroup, Location=vm.Location,
            Zone=vm.Zone, ScaleSetName=vm.ScaleSetName, FaultDomain=vm.FaultDomain,
            UpdateDomain=vm.UpdateDomain, AgentVersion=vm.AgentVersion,
            UptimeSeconds=round(time.monotonic() - self._started_mono, 3),
            Polls=self._polls(), PollErrors=rec.stats.errors if rec else 0,
            LastPollLatencyMs=None if self.last_latency_ms is None else round(self.last_latency_ms, 3),
            LastIncarnation=state.last_incarnation, OpenEvents=len(state.events),
            SpoolDepth=max(depths.values(), default=0),
            DeliveredRecords=totals["delivered"], FailedDeliveries=totals["failed"],
            DroppedRecords=totals["dropped"], DeadLetteredRecords=totals["dead_lettered"],
        )

    def _heartbeat(self, reason: str) -> None:
        rec = self.recorder
        assert rec is not None
        hb = self.build_heartbeat(reason)
        if not rec.enqueue(hb):
            return
        logs.event(self.log, logging.INFO, "heartbeat", Reason=reason, Polls=hb.Polls,
                   PollErrors=hb.PollErrors, SpoolDepth=hb.SpoolDepth, DroppedRecords=hb.DroppedRecords)
        for w in self.workers:
            w.notify()

    def status(self, *, stopped: bool = False) -> dict:
        rec = self.recorder
        state = rec.state if rec else tracker.TrackerState()
        depths = self.store.depths()
        totals = self._totals()
        return {
            "version": __version__,
            "pid": os.getpid(),
            "started_at": self.started,
            "written_at": time.time(),
            "poll_interval": self.config.agent.poll_interval,
            "last_poll_at": self.last_poll_at,
            "last_poll_ok": bool(rec and rec.stats.last_ok),
            "last_poll_ok_at": None if not rec or rec.stats.last_ok_ms is None
            else rec.stats.last_ok_ms / 1000,
            "last_poll_error": rec.stats.last_error if rec and not rec.stats.last_ok else None,
            "last_poll_latency_ms": self.last_latency_ms,
            "polls": self._polls(),
            "poll_errors": rec.stats.errors if rec else 0,
            "last_incarnation": state.last_incarnation,
            "open_events": [
                {"EventId": eid, "EventType": te.view.event_type, "EventStatus": te.view.status,
                 "NotBefore": format_ms(te.view.not_before_ms),
                 "AffectsThisVm": self.vm.affects(te.view.resources)}
                for eid, te in state.events.items()
            ],
            "delivered": totals["delivered"],
            "failed_deliveries": totals["failed"],
            "dropped": totals["dropped"],
            "dead_lettered": totals["dead_lettered"],
            "sinks": {
                w.sink.name: {"spool_depth": depths.get(w.sink.name, 0),
                              "last_delivery_at": w.stats.last_delivery_at,
                              "last_error": w.stats.last_error}
                for w in self.workers
            },
            "stopped": stopped,
        }

    def write_status(self, *, stopped: bool = False) -> None:
        path = self.state_dir / "status.json"
        tmp = path.with_suffix(".json.tmp")
        try:
            tmp.write_text(json.dumps(self.status(stopped=stopped), separators=(",", ":")))
            os.replace(tmp, path)
        except OSError as exc:
            logs.event(self.log, logging.WARNING, "cannot write status.json", error=str(exc))
