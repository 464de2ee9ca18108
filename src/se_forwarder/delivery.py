"""Drain the outbox into one sink: batching, retries, splitting, dead letters, acknowledgement.

One worker thread per sink, each with its own cursor in the outbox, so a slow or broken sink
never holds back another. A record leaves the outbox for a sink only after that sink confirmed
it (``send`` returned) or it was written to the dead-letter file with the reason: delivery is
at-least-once and in order, and nothing is dropped silently.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import logs
from .sinks.base import BatchRejected, BatchTooLarge, OutboxItem, RetryableError, Sink
from .store import Store

BACKOFF_BASE, BACKOFF_CAP = 0.5, 60.0  # seconds: fast schedule (throttling, outages)
SLOW_BASE, SLOW_CAP = 15.0, 300.0  # auth errors: a role assignment takes minutes to appear
IDLE_WAKE_SECONDS = 30.0
MIN_RETRY_AFTER = 0.1  # a "Retry-After: 0" must not become a tight loop
REJECTED_IN_ROW_LIMIT = 20  # more rejected records in a row than this: the service refuses all


def after_retry_after(seconds: float) -> float:
    """Honour the service's Retry-After, plus up to 10 % jitter so a fleet throttled at the same
    moment does not come back at the same moment."""
    return min(max(seconds, MIN_RETRY_AFTER), SLOW_CAP) * random.uniform(1.0, 1.1)


def backoff(attempt: int, *, slow: bool = False) -> float:
    """Exponential backoff with full jitter."""
    base, cap = (SLOW_BASE, SLOW_CAP) if slow else (BACKOFF_BASE, BACKOFF_CAP)
    return random.uniform(0, min(cap, base * 2 ** min(attempt, 20)))


@dataclass(slots=True)
class SinkStats:
    delivered: int = 0
    failed: int = 0  # failed delivery attempts
    dead_lettered: int = 0
    last_delivery_at: float | None = None  # epoch seconds
    last_error: str | None = None


class DeadLetters:
    """``dead-letter.jsonl``: records a sink can never accept, each with the reason."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, sink: str, reason: str, items: Sequence[OutboxItem]) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        lines = []
        for item in items:
            try:
                record = json.loads(item.payload)
            except ValueError:
                record = item.payload
            lines.append(json.dumps({"time": now, "sink": sink, "reason": reason, "table": item.table,
                                     "seq": item.seq, "record": record}, separators=(",", ":")))
        data = ("\n".join(lines) + "\n").encode("utf-8")
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)


class DeliveryWorker(threading.Thread):
    def __init__(self, sink: Sink, store: Store, dead_letters: DeadLetters, *,
                 stop: threading.Event, logger: logging.Logger | None = None) -> None:
        super().__init__(name=f"sink-{sink.name}", daemon=True)
        self.sink = sink
        self.store = store
        self.dead_letters = dead_letters
        self.stats = SinkStats()
        self.stop_event = stop  # abort now (waits end, nothing more is sent)
        self.draining = threading.Event()  # send what is there without lingering, then exit
        self.wake = threading.Event()  # new records were committed
        self.log = logger or logs.get("delivery")
        # One batch's worth plus one (enough to tell a full batch); reading twice that re-read
        # the unused half on every round and cost the LA drain ~10 % of its throughput.
        self._fetch_limit = max(sink.limits.max_records + 1, 64)
        self._rejected_in_row = 0  # records dead-lettered as rejected since the last success

    def notify(self) -> None:
        self.wake.set()

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> None:
        errors = 0
        try:
            while not self.stop_event.is_set():
                try:
                    if not self._round():
                        return
                    errors = 0
                except Exception as exc:  # noqa: BLE001 - a full disk, a locked database: never die
                    delay = backoff(errors)
                    errors += 1
                    self.stats.last_error = f"{type(exc).__name__}: {exc}"
                    if not self.stop_event.is_set():
                        logs.event(self.log, logging.ERROR, "delivery worker error; will retry",
                                   sink=self.sink.name, error=self.stats.last_error,
                                   retry_in=round(delay, 2))
                    if self.stop_event.wait(delay):
                        return
        finally:
            try:
                self.sink.close()
            except Exception:  # noqa: BLE001, S110 - closing on the way out: nothing to do about it
                pass

    def _round(self) -> bool:
        """Fetch, batch, deliver, acknowledge once. False when the worker should end."""
        items = self._fetch()
        if not items:
            if self.draining.is_set():
                return False
            self._wait(None)
            return True
        batch, upto = self._form_batch(items)
        linger = self.sink.limits.linger_seconds
        if batch and not self._full(batch, items) and not self.draining.is_set() and linger > 0:
            # Linger up to linger_seconds for the batch to fill, then send what is there.
            # (Each new record wakes us: look again, but keep waiting until full or due.)
            due = time.monotonic() + linger
            while not self.stop_event.is_set() and not self.draining.is_set():
                left = due - time.monotonic()
                if left <= 0:
                    break
                self._wait(left)
                items = self._fetch()
                batch, upto = self._form_batch(items)
                if not batch or self._full(batch, items):
                    break
        if batch and not self._deliver(batch):
            return False  # stopped while retrying: the records stay in the outbox
        self.store.ack(self.sink.name, upto)
        return True

    def _wait(self, timeout: float | None) -> None:
        # Idle: the agent notifies after every commit, so this only wakes as a safety net (a
        # wake-up every second would cost every VM of the fleet CPU for nothing).
        self.wake.wait(timeout if timeout is not None else IDLE_WAKE_SECONDS)
        self.wake.clear()

    def _fetch(self) -> list[OutboxItem]:
        return self.store.fetch(self.sink.name, self._fetch_limit)

    def _full(self, batch: list[OutboxItem], fetched: list[OutboxItem]) -> bool:
        """Nothing more can join this batch: it is at a limit, or the next fetched record
        cannot join it (another table, a dead letter)."""
        lim = self.sink.limits
        return len(batch) >= lim.max_records or len(batch) < len(fetched) \
            or sum(i.size for i in batch) >= lim.max_bytes * 0.9

    def _form_batch(self, items: list[OutboxItem]) -> tuple[list[OutboxItem], int]:
        """Consecutive records of one table within the limits; returns (batch, seq to ack after
        it is delivered). Records this sink does not take are skipped; records it can never
        take are dead-lettered here, so they never block the queue."""
        lim = self.sink.limits
        batch: list[OutboxItem] = []
        size = 2  # "[" and "]"
        upto = items[0].seq - 1
        for item in items:
            if item.table not in self.sink.tables:
                if batch:
                    break
                upto = item.seq
                continue
            reason = self.sink.reject_reason(item)
            if reason is None and item.size > lim.max_record_bytes:
                reason = f"record of {item.size} bytes is over the {lim.max_record_bytes}-byte limit"
            if reason is not None:
                if batch:
                    break
                self._dead_letter(reason, [item])
                upto = item.seq
                continue
            if batch and (item.table != batch[0].table or len(batch) >= lim.max_records
                          or size + item.size + 1 > lim.max_bytes):
                break
            batch.append(item)
            size += item.size + 1
            upto = item.seq
        return batch, upto

    def _deliver(self, batch: list[OutboxItem]) -> bool:
        """Send until confirmed, split or dead-lettered. False if stopped first."""
        attempt = 0
        while not self.stop_event.is_set():
            try:
                self.sink.send(batch)
            except BatchTooLarge as exc:
                if len(batch) == 1:
                    self._dead_letter(f"too large for the service: {exc}", batch)
                    return True
                half = len(batch) // 2
                logs.event(self.log, logging.WARNING, "batch too large; splitting", sink=self.sink.name,
                           records=len(batch), error=str(exc))
                return self._deliver(batch[:half]) and self._deliver(batch[half:])
            except BatchRejected as exc:
                if len(batch) > 1:  # isolate the record the service refuses; send the rest
                    half = len(batch) // 2
                    return self._deliver(batch[:half]) and self._deliver(batch[half:])
                if self._rejected_in_row < REJECTED_IN_ROW_LIMIT:
                    self._rejected_in_row += 1
                    self._dead_letter(f"rejected by the service: {exc}", batch)
                    return True
                # Every record is refused: a DCR or contract mismatch, not bad records. Keep
                # them (dead-lettering would empty the outbox) and retry slowly until fixed.
                delay = backoff(attempt, slow=True)
                self._failed(f"the service rejects every record (check the DCR and the contract "
                             f"version): {exc}", batch, delay, attempt)
            except RetryableError as exc:
                delay = (after_retry_after(exc.retry_after) if exc.retry_after is not None
                         else backoff(attempt, slow=exc.slow))
                self._failed(str(exc), batch, delay, attempt)
            except Exception as exc:  # noqa: BLE001 - unknown: retry, but say what it was
                delay = backoff(attempt)
                self._failed(f"{type(exc).__name__}: {exc}", batch, delay, attempt)
            else:
                self._rejected_in_row = 0
                self.stats.delivered += len(batch)
                self.stats.last_delivery_at = time.time()
                self.stats.last_error = None
                return True
            attempt += 1
            if self.stop_event.wait(delay):
                break
        return False

    def _failed(self, error: str, batch: list[OutboxItem], delay: float, attempt: int) -> None:
        self.stats.failed += 1
        self.stats.last_error = error
        logs.event(self.log, logging.WARNING, "delivery failed; will retry", sink=self.sink.name,
                   error=error, records=len(batch), attempt=attempt + 1, retry_in=round(delay, 2))

    def _dead_letter(self, reason: str, items: list[OutboxItem]) -> None:
        self.dead_letters.write(self.sink.name, reason, items)
        self.stats.dead_lettered += len(items)
        logs.event(self.log, logging.ERROR, "records dead-lettered", sink=self.sink.name,
                   reason=reason, records=len(items), file=str(self.dead_letters.path))
