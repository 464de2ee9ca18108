"""The agent: the composition root and the poll loop.

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
from dataclasses import asdict
from pathlib import Path

from . import __version__, logs, tracker
from .actions import Actions
from .config import Config
from .delivery import DeliveryPool
from .health import OpenEvent, SinkHealth, Snapshot
from .imds.client import ImdsClient
from .imds.instance import read_identity
from .model import Heartbeat, LifecycleRecord, VmIdentity
from .outbox import Store
from .recorder import Recorder
from .sinks.base import Sink
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
        self.delivery = DeliveryPool(sinks, self.store, self.state_dir / "dead-letter.jsonl")
        self.actions = Actions.build(config.policy, self.store, config.imds, self.client.limiter)
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
        for name in self.store.register_sinks(self.delivery.names):
            logs.event(self.log, logging.WARNING, "sink no longer configured; its backlog is released",
                       sink=name)
        self.delivery.start()
        logs.event(self.log, logging.INFO, "agent starting", version=__version__,
                   endpoint=self.config.imds.endpoint, api_version=self.config.imds.api_version,
                   sinks=self.delivery.names, state_dir=str(self.state_dir))
        try:
            self.vm = read_identity(self.client, self.stop, IDENTITY_WAIT_SECONDS, self.log)
            if self.stop.is_set():
                return 0
            self.recorder = Recorder(self.store, self.vm, on_records=self._on_records)
            self.actions.start(self.recorder)
            self._heartbeat("start")
            self._loop()
        finally:
            self._shutdown()
        return 0

    def _loop(self) -> None:
        assert self.recorder is not None
        interval = self.config.agent.poll_interval
        hb_every = self.config.agent.heartbeat_interval
        mono = time.monotonic
        next_poll = mono()
        next_hb = next_poll + hb_every
        next_status = next_poll
        next_checkpoint = next_poll + CHECKPOINT_EVERY
        next_refresh = next_poll + self._refresh_every()
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
                next_refresh = t + self._refresh_every()
            next_poll += interval
            if next_poll < t:  # fell behind (a slow answer): don't burst to catch up
                next_poll = t + interval
            self.stop.wait(next_poll - t)

    def _refresh_every(self) -> float:
        return self.config.imds.instance_refresh_seconds if self.vm.VmId else IDENTITY_RETRY_SECONDS

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
            self.actions.stop()
            if self.recorder is not None:
                self.recorder.checkpoint()
                self._heartbeat("stop")
            self.delivery.drain(self.config.agent.stop_flush_seconds)  # send what is waiting
            busy = self.delivery.stop()
            if busy:
                logs.event(self.log, logging.WARNING, "sink still sending at exit; its records stay "
                           "in the outbox and are sent again at the next start", sinks=busy)
            self.write_status(stopped=True)
        finally:
            self.client.close()
            if not self.delivery.alive():  # a live worker still holds the store
                self.store.close()
            logs.event(self.log, logging.INFO, "agent stopped", polls=self._polls())

    def _refresh_identity(self) -> None:
        vm = read_identity(self.client, self.stop, 0.0, self.log, quiet=True)
        if vm.VmId and vm != self.vm and self.recorder is not None:
            logs.event(self.log, logging.INFO, "VM identity changed", VmName=vm.VmName, Zone=vm.Zone)
            self.vm = self.recorder.vm = vm

    # -- records, heartbeats, status ----------------------------------------------------------

    def _on_records(self, records: list[LifecycleRecord]) -> None:
        self.delivery.notify()
        self.actions.on_records(records)
        if self._user_on_records is not None:
            self._user_on_records(records)

    def _polls(self) -> int:
        return self.recorder.stats.polls if self.recorder else 0

    def snapshot(self, *, stopped: bool = False) -> Snapshot:
        """Everything status.json and the heartbeat say, taken once."""
        rec = self.recorder
        state = rec.state if rec else tracker.TrackerState()
        stats = rec.stats if rec else None
        depths = self.store.depths()
        totals = self.delivery.totals()
        return Snapshot(
            version=__version__, pid=os.getpid(), started_at=self.started, written_at=time.time(),
            poll_interval=self.config.agent.poll_interval,
            uptime_seconds=time.monotonic() - self._started_mono,
            last_poll_at=self.last_poll_at, last_poll_ok=bool(stats and stats.last_ok),
            last_poll_ok_at=None if not stats or stats.last_ok_ms is None
            else stats.last_ok_ms / 1000,
            last_poll_error=stats.last_error if stats and not stats.last_ok else None,
            last_poll_latency_ms=self.last_latency_ms,
            polls=stats.polls if stats else 0, poll_errors=stats.errors if stats else 0,
            last_incarnation=state.last_incarnation,
            open_events=tuple(
                OpenEvent(eid, te.view.event_type, te.view.status, te.view.source,
                          format_ms(te.view.not_before_ms), te.view.duration,
                          self.vm.affects(te.view.resources))
                for eid, te in state.events.items()),
            delivered=totals.delivered, failed_deliveries=totals.failed,
            dropped=self.store.counter("dropped") - self._dropped_at_start,
            dead_lettered=totals.dead_lettered, spool_depth=max(depths.values(), default=0),
            sinks={name: SinkHealth(depths.get(name, 0), s.last_delivery_at, s.last_error)
                   for name, s in self.delivery.stats().items()},
            stopped=stopped, **asdict(self.actions.stats()))

    def build_heartbeat(self, reason: str) -> Heartbeat:
        return self.snapshot().heartbeat(reason, self.vm, format_ms(now_ms()), str(uuid.uuid4()))

    def _heartbeat(self, reason: str) -> None:
        rec = self.recorder
        assert rec is not None
        hb = self.build_heartbeat(reason)
        if not rec.enqueue(hb):
            return
        logs.event(self.log, logging.INFO, "heartbeat", Reason=reason, Polls=hb.Polls,
                   PollErrors=hb.PollErrors, SpoolDepth=hb.SpoolDepth, DroppedRecords=hb.DroppedRecords)
        self.delivery.notify()

    def write_status(self, *, stopped: bool = False) -> None:
        path = self.state_dir / "status.json"
        tmp = path.with_suffix(".json.tmp")
        try:
            tmp.write_text(json.dumps(self.snapshot(stopped=stopped).to_json(),
                                      separators=(",", ":")))
            os.replace(tmp, path)
        except OSError as exc:
            logs.event(self.log, logging.WARNING, "cannot write status.json", error=str(exc))
