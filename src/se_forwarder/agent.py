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
from typing import TYPE_CHECKING

from . import __version__, actions, logs, platform, redact, tracker
from .config import Config
from .delivery import DeliveryPool
from .delivery.backoff import Schedule
from .errors import ImdsError
from .health import STATUS_FILE, OpenEvent, SinkHealth, Snapshot
from .imds.client import ImdsClient
from .imds.instance import identity_from_instance
from .model import Heartbeat, LifecycleRecord
from .outbox.recovery import open_or_recover
from .recorder import Recorder
from .sinks.base import Sink
from .timefmt import format_ms

if TYPE_CHECKING:
    from .metrics.exporter import Exporter

STATUS_EVERY = 5.0  # seconds between status.json writes
CHECKPOINT_EVERY = 30.0  # seconds between saves of the last successful poll time
IDENTITY_RETRY = Schedule(5.0, 60.0)  # asking again for an instance document that failed
DROPPED_REPORTED = "dropped_reported"  # store counter: drops included in a committed heartbeat
BIG_ANSWER_BYTES = 1024 * 1024  # after such an answer, give the memory back to the system
STATUS_BLOCK = 4096  # status.json is padded to whole blocks: rewritable in place on a full disk


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Agent:
    def __init__(self, config: Config, sinks: list[Sink], *, stop: threading.Event | None = None,
                 on_records: Callable[[list[LifecycleRecord]], None] | None = None) -> None:
        self.config = config
        self.stop = stop or threading.Event()
        self.log = logs.get("agent")
        self.state_dir = Path(config.agent.state_dir)
        self.store, recovered = open_or_recover(self.state_dir, max_bytes=config.spool.max_bytes)
        if recovered:
            logs.event(self.log, logging.CRITICAL, recovered, state_dir=str(self.state_dir))
        self.sinks = sinks
        self._user_on_records = on_records
        self.client = ImdsClient(
            config.imds.endpoint, api_version=config.imds.api_version, timeout=config.imds.timeout,
            first_call_timeout=config.imds.first_call_timeout,
            max_requests_per_second=config.imds.max_requests_per_second, stop=self.stop)
        self.delivery = DeliveryPool(sinks, self.store, self.state_dir / "dead-letter.jsonl")
        self.metrics = self._metrics()
        self.actions = actions.build(config.policy, self.store, config.imds, self.client.limiter,
                                     wake=self.delivery.notify)
        self.started = time.time()
        self._started_mono = time.monotonic()
        self._last_at = 0  # wall-clock time of the last poll, ms: never goes backwards
        self.recorder: Recorder | None = None
        # Until the instance document answers: the host name, or agent.vm_name, as VmName.
        self.vm = identity_from_instance({}, vm_name=config.agent.vm_name)
        self._identity_failures = 0
        self.last_latency_ms: float | None = None
        self.last_poll_at: float | None = None
        # Drops are reported by heartbeats as a count per agent run; drops the previous run made
        # after its last heartbeat are carried into this run's (the baseline is what was reported).
        self._dropped_base = self.store.counter(DROPPED_REPORTED)

    # -- lifecycle ----------------------------------------------------------------------------

    def run(self) -> int:
        for name in self.store.register_sinks(self.delivery.names):
            logs.event(self.log, logging.WARNING, "sink no longer configured; its backlog is released",
                       sink=name)
        self.delivery.start()
        logs.event(self.log, logging.INFO, "agent starting", version=__version__,
                   endpoint=self.config.imds.endpoint, api_version=self.config.imds.api_version,
                   sinks=self.delivery.names, state_dir=str(self.state_dir))
        self.write_status()  # `status` says STARTING from the first second, not MISSING
        try:
            self._start_metrics()
            # One quick attempt at the instance document first (bounded by imds.timeout), so the
            # first records, the start heartbeat and the policy's view of open events carry the
            # VM's identity when it answers.
            retry_identity = self._refresh_identity()
            self.recorder = Recorder(self.store, self.vm, on_records=self._on_records)
            self.actions.start(self.recorder)  # before the first poll: it picks up open events
            self._loop(retry_identity)
        finally:
            self._shutdown()
        return 0

    def _loop(self, retry_identity: float) -> None:
        """Poll at a steady cadence; the rest on its own schedule. Polling never waits for the
        instance document: one attempt first, then it is asked for again on its own schedule
        until it answers (a Spot eviction gives 30 s; it must not wait for the identity)."""
        assert self.recorder is not None
        interval = self.config.agent.poll_interval
        mono = time.monotonic
        next_identity = mono() + retry_identity
        self._heartbeat("start")
        next_poll = mono()
        due = {"status": next_poll, "checkpoint": next_poll + CHECKPOINT_EVERY, "metrics": next_poll,
               "heartbeat": next_poll + self.config.agent.heartbeat_interval,
               "identity": next_identity}
        while not self.stop.is_set():
            self._poll()
            t = mono()
            if t >= due["identity"]:
                due["identity"] = t + self._refresh_identity()
            self._chores(t, due)
            next_poll += interval
            if next_poll < t:  # fell behind (a slow answer): don't burst to catch up
                next_poll = t + interval
            self.stop.wait(next_poll - t)

    def _chores(self, t: float, due: dict[str, float]) -> None:
        if t >= due["status"]:
            self.write_status()
            due["status"] = t + STATUS_EVERY
        if t >= due["heartbeat"]:
            self._heartbeat("periodic")
            due["heartbeat"] = t + self.config.agent.heartbeat_interval
        if t >= due["checkpoint"]:
            assert self.recorder is not None
            self.recorder.checkpoint()
            due["checkpoint"] = t + CHECKPOINT_EVERY
        if t >= due["metrics"] and self.metrics is not None:
            self._metrics_textfile()
            due["metrics"] = t + self.config.metrics.textfile_interval

    def _metrics(self) -> Exporter | None:
        """prometheus-client is imported only when [metrics] is configured."""
        if not self.config.metrics.enabled:
            return None
        from .metrics.exporter import Exporter
        return Exporter(self.config.metrics, self.snapshot,
                        lambda: dict(self.recorder.stats.records) if self.recorder else {})

    def _start_metrics(self) -> None:
        if self.metrics is None:
            return
        try:
            self.metrics.start()
        except OSError as exc:  # the port is taken: say so, and keep watching maintenance
            logs.event(self.log, logging.ERROR, "cannot serve metrics; the textfile (if any) is "
                       "still written", listen=self.config.metrics.listen, error=str(exc))

    def _metrics_textfile(self) -> None:
        assert self.metrics is not None
        try:
            self.metrics.write_textfile()
        except OSError as exc:
            logs.event(self.log, logging.WARNING, "cannot write the metrics textfile",
                       path=str(self.config.metrics.textfile), error=str(exc))

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
            if len(answer.body) > BIG_ANSWER_BYTES:  # a pathological document: do not keep its RSS
                del answer
                platform.release_memory()

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
            if self.metrics is not None:
                self._metrics_textfile()
                self.metrics.stop()
        finally:
            self.client.close()
            if not self.delivery.alive():  # a live worker still holds the store
                self.store.close()
            logs.event(self.log, logging.INFO, "agent stopped", polls=self._polls())

    def _refresh_identity(self) -> float:
        """Ask for the instance document; seconds until it should be asked for again."""
        try:
            vm = identity_from_instance(self.client.instance(), vm_name=self.config.agent.vm_name)
        except ImdsError as exc:
            delay = IDENTITY_RETRY.delay(self._identity_failures) + 1.0
            self._identity_failures += 1
            if self._identity_failures == 1 or self._identity_failures % 10 == 0:
                logs.event(self.log, logging.WARNING, "instance document unavailable; retrying",
                           error=str(exc), failures=self._identity_failures,
                           retry_in=round(delay, 1), VmName=self.vm.VmName)
            return delay if not self.vm.VmId else self.config.imds.instance_refresh_seconds
        self._identity_failures = 0
        if vm != self.vm:
            logs.event(self.log, logging.INFO, "VM identity", VmName=vm.VmName, VmId=vm.VmId,
                       Zone=vm.Zone, ScaleSetName=vm.ScaleSetName)
            self.vm = vm
            if self.recorder is not None:
                self.recorder.vm = vm
        return self.config.imds.instance_refresh_seconds

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
            dropped=self.store.counter("dropped") - self._dropped_base,
            dead_lettered=totals.dead_lettered, spool_depth=max(depths.values(), default=0),
            sinks={name: SinkHealth(depths.get(name, 0), s.last_delivery_at, s.last_error,
                                    s.delivered, s.failed, s.dead_lettered)
                   for name, s in self.delivery.stats().items()},
            malformed_events=stats.malformed_events if stats else 0,
            truncated_values=stats.truncated_values if stats else 0,
            persist_failures=stats.persist_failures if stats else 0,
            persist_error=stats.persist_error if stats else None,
            disk_full=bool(stats and stats.disk_full),
            stopped=stopped, **asdict(self.actions.stats()))

    def build_heartbeat(self, reason: str) -> Heartbeat:
        return self.snapshot().heartbeat(reason, self.vm, format_ms(now_ms()), str(uuid.uuid4()))

    def _heartbeat(self, reason: str) -> None:
        rec = self.recorder
        assert rec is not None
        hb = self.build_heartbeat(reason)
        reported = {f"counter:{DROPPED_REPORTED}": self._dropped_base + hb.DroppedRecords}
        if not rec.enqueue(hb, reported):
            return
        logs.event(self.log, logging.INFO, "heartbeat", Reason=reason, Polls=hb.Polls,
                   PollErrors=hb.PollErrors, SpoolDepth=hb.SpoolDepth, DroppedRecords=hb.DroppedRecords)
        self.delivery.notify()

    def write_status(self, *, stopped: bool = False) -> None:
        """Atomically (a new file renamed over the old); on a full disk, where no new file can be
        made, rewritten in place within the blocks it already has, so `status` still tells."""
        path = self.state_dir / STATUS_FILE
        snap = redact.data(self.snapshot(stopped=stopped).to_json(), by_key=False)
        text = json.dumps(snap, separators=(",", ":"))
        data = text.encode("utf-8")
        data += b" " * (-len(data) % STATUS_BLOCK)  # whitespace after JSON is still JSON
        tmp = path.with_suffix(".json.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if not self._rewrite_in_place(path, data):
                logs.event(self.log, logging.WARNING, "cannot write status.json", error=str(exc))

    @staticmethod
    def _rewrite_in_place(path: Path, data: bytes) -> bool:
        try:
            if path.stat().st_size < len(data):
                return False
            with path.open("r+b") as f:
                f.write(data)
                f.truncate(len(data))
            return True
        except OSError:
            return False
