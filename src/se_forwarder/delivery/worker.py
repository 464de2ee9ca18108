"""Drain the outbox into one sink: batching, retries, splitting, dead letters, acknowledgement.

One worker thread per sink, each with its own cursor in the outbox, so a slow or broken sink
never holds back another. A row leaves the outbox for a sink only after that sink confirmed it
(its ``SendResult`` counts it) or it was written to the dead-letter file with the reason:
delivery is at-least-once and in order, and nothing is dropped silently. What happens after a
failure is the verdict the sink's answer table gave it (``sinks/answers.py``), one branch each.

With a backlog (a full batch), the next batch is read in a thread of its own (``_Ahead``) and
given to the sink to prepare (``Sink.prepare``: Event Hubs encodes its events) while this one is
sent and then acknowledged (a synchronous commit: its fsync releases the interpreter to the
preparation). Sends stay one at a time, in order, in the worker's thread, and a batch is
acknowledged there, as without a backlog, once its send confirmed it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from .. import backoff, logs
from ..clock import SYSTEM, Clock
from ..errors import DeliveryError, Verdict
from ..outbox import OutboxRow, Store
from ..sinks.base import SendResult, Sink
from .dead_letters import DeadLetters

IDLE_WAKE_SECONDS = 30.0
REJECTED_IN_ROW_LIMIT = 20  # more rejected records in a row than this: the service refuses all


@dataclass(slots=True)
class SinkStats:
    delivered: int = 0
    failed: int = 0  # failed delivery attempts (programming errors included)
    dead_lettered: int = 0
    last_delivery_at: float | None = None  # epoch seconds
    last_error: str | None = None
    # From the sink's results: the requests (transfers) that delivered, their bytes on the wire.
    requests: int = 0
    bytes_sent: int = 0
    largest_request: int = 0


class Step(StrEnum):
    """What a failed send leads to, besides a retry (``_Retry``, which carries its delay)."""

    SPLIT = "split"  # send the two halves of the batch in turn
    HANDLED = "handled"  # dead-lettered: the batch is done with


@dataclass(frozen=True, slots=True)
class _Retry:
    delay: float


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a batch is made of, read from fetched rows: the rows to send, the seq to acknowledge
    after them and the rows to dead-letter first (each with why)."""

    rows: list[OutboxRow]  # as fetched (a full batch is told by what follows it)
    batch: list[OutboxRow]
    upto: int
    rejects: list[tuple[str, OutboxRow]]


class _Ahead(threading.Thread):
    """Beside the send of a batch and its acknowledgement: the rows after it read, planned and
    given to the sink to prepare. Nothing here sends, dead-letters or moves the cursor."""

    def __init__(self, worker: DeliveryWorker, after: int) -> None:
        super().__init__(name=f"{worker.name}-ahead", daemon=True)
        self.worker = worker
        self.after = after
        self.plan: _Plan | None = None
        self.error: Exception | None = None  # raised in the worker's thread (``_round``)

    def run(self) -> None:
        try:
            rows = self.worker._fetch(after=self.after)
            if rows:
                self.plan = self.worker._plan(rows)
        except Exception as exc:
            self.error = exc
            return
        if self.plan is not None and self.plan.batch:
            self.worker._prepare(self.plan.batch)


class DeliveryWorker(threading.Thread):
    def __init__(
        self,
        sink: Sink,
        store: Store,
        dead_letters: DeadLetters,
        *,
        stop: threading.Event,
        logger: logging.Logger | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        super().__init__(name=f"sink-{sink.name}", daemon=True)
        self.clock = clock
        self.sink = sink
        self.store = store
        self.dead_letters = dead_letters
        self.stats = SinkStats()
        self.stop_event = stop  # abort now (waits end, nothing more is sent)
        self.draining = threading.Event()  # send what is there without lingering, then exit
        self.wake = clock.event()  # new records were committed
        self.done = clock.event()  # the worker has ended (the pool waits for it on the clock)
        self.log = logger or logs.get("delivery")
        self._rejected_in_row = 0  # records dead-lettered as rejected since the last success
        self._bug_logged: str | None = None  # the programming error whose traceback was logged
        self._confirmed: list[int] = []  # seqs delivered or dead-lettered since the last ack
        self._row_bytes = 0.0  # the mean size of the rows last fetched: how many fill a batch
        self._next: _Plan | None = None  # the next batch, read while the last one was sent
        self._prepare_failed = False  # a failure of ``Sink.prepare`` was logged

    def notify(self) -> None:
        self.wake.set()

    @property
    def _fetch_limit(self) -> int:
        # One batch's worth plus one (enough to tell a full batch); reading twice that re-read
        # the unused half on every round and cost the LA drain ~10 % of its throughput.
        return max(self.sink.limits.max_records + 1, 64)

    def _fetch_by_bytes(self) -> int:
        """The rows that fill ``max_bytes`` if they are as large as the last ones fetched (a
        quarter to spare), when that is fewer than ``_fetch_limit``: Event Hubs' batches of
        ~600 records by bytes read 2,001 rows a round, 7 % of its drain."""
        if not self._row_bytes:
            return self._fetch_limit
        by_bytes = int(self.sink.limits.max_bytes / self._row_bytes * 1.25) + 2
        return min(self._fetch_limit, max(by_bytes, 64))

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> None:
        errors = 0
        try:
            while not self.stop_event.is_set():
                try:
                    if not self._round():
                        return
                    errors = 0
                except Exception as exc:
                    delay = backoff.FAST.delay(errors)
                    errors += 1
                    self.stats.last_error = f"{type(exc).__name__}: {exc}"
                    if not self.stop_event.is_set():
                        logs.event(
                            self.log,
                            logging.ERROR,
                            "delivery worker error; will retry",
                            sink=self.sink.name,
                            error=self.stats.last_error,
                            retry_in=round(delay, 2),
                        )
                    if self.clock.wait(self.stop_event, delay):
                        return
        finally:
            with contextlib.suppress(Exception):
                self.sink.close()
            self.done.set()

    def _round(self) -> bool:
        """Fetch, batch, deliver, acknowledge once. False when the worker should end."""
        plan, self._next = self._next, None
        if plan is None:
            rows = self._fetch()
            if not rows:
                if self.draining.is_set():
                    return False
                self._wait(None)
                return True
            plan = self._plan(rows)
        rows = plan.rows
        batch, upto = self._apply(plan)
        linger = self.sink.limits.linger_seconds
        if batch and not self._full(batch, rows) and not self.draining.is_set() and linger > 0:
            # Linger up to linger_seconds for the batch to fill, then send what is there.
            # (Each new record wakes us: look again, but keep waiting until full or due.)
            due = self.clock.monotonic() + linger
            while not self.stop_event.is_set() and not self.draining.is_set():
                left = due - self.clock.monotonic()
                if left <= 0:
                    break
                self._wait(left)
                rows = self._fetch()
                batch, upto = self._form_batch(rows)
                if not batch or self._full(batch, rows):
                    break
        if not batch:
            self._ack(upto)
            return True
        # A full batch: more wait behind it. Read the next and have the sink prepare it beside
        # this one's send and acknowledgement (``_Ahead``).
        ahead = self._start_ahead(upto) if self._full(batch, rows) else None
        try:
            if not self._deliver(batch):
                return False  # stopped while retrying: the records stay in the outbox
            self._ack(upto)
        finally:
            if ahead is not None:
                ahead.join()
        if ahead is not None:
            if ahead.error is not None:
                raise ahead.error
            self._next = ahead.plan
        return True

    def _start_ahead(self, upto: int) -> _Ahead:
        ahead = _Ahead(self, upto)
        self.clock.track(ahead)
        ahead.start()
        return ahead

    def _prepare(self, batch: list[OutboxRow]) -> None:
        """``Sink.prepare`` (in ``_Ahead``): work done ahead, never needed: a failure is a bug
        in the sink, logged once with its traceback, and ``send`` does the work itself."""
        try:
            self.sink.prepare(batch)
        except Exception as exc:
            if not self._prepare_failed:
                self._prepare_failed = True
                self.log.error(
                    "preparing a batch failed: internal error in the sink (please report it)",
                    exc_info=exc,
                    extra={"fields": {"sink": self.sink.name}},
                )

    def _ack(self, upto: int) -> None:
        """Move the cursor to ``upto``, telling the store exactly which rows were confirmed: a
        row the spool bound dropped while it was being sent is lost only if it is not."""
        confirmed, self._confirmed = self._confirmed, []
        lost = self.store.ack(self.sink.name, upto, confirmed)
        if lost:
            logs.event(
                self.log,
                logging.ERROR,
                "records dropped by the spool bound while being sent were not confirmed: lost",
                sink=self.sink.name,
                records=lost,
            )

    def _wait(self, timeout: float | None) -> None:
        # Idle: the agent notifies after every commit, so this only wakes as a safety net (a
        # wake-up every second would cost every VM of the fleet CPU for nothing).
        self.clock.wait(self.wake, timeout if timeout is not None else IDLE_WAKE_SECONDS)
        self.wake.clear()

    def _fetch(self, after: int | None = None) -> list[OutboxRow]:
        """The rows a batch can take, and one more (a full batch is told from a short one): when
        the rows fetched by bytes turn out smaller than the last ones, again by count. After the
        cursor, or after ``after`` (the batch being sent: these are to be sent after it)."""
        limit = self._fetch_by_bytes()
        name = self.sink.name
        rows = self.store.fetch(name, limit, after, to_send=True)
        if rows:
            size = sum(r.size for r in rows)
            self._row_bytes = size / len(rows)
            if len(rows) == limit < self._fetch_limit and size + len(rows) + 2 <= (
                self.sink.limits.max_bytes
            ):
                rows = self.store.fetch(name, self._fetch_limit, after, to_send=True)
        return rows

    def _full(self, batch: list[OutboxRow], fetched: list[OutboxRow]) -> bool:
        """Nothing more can join this batch: it is at a limit, or the next fetched row cannot
        join it (another table, a dead letter)."""
        lim = self.sink.limits
        return (
            len(batch) >= lim.max_records
            or len(batch) < len(fetched)
            or sum(r.size for r in batch) >= lim.max_bytes * 0.9
        )

    def _form_batch(self, rows: list[OutboxRow]) -> tuple[list[OutboxRow], int]:
        """Consecutive rows of one table within the limits; returns (batch, seq to ack after it
        is delivered). Rows this sink does not take are skipped; rows it can never take are
        dead-lettered here, so they never block the queue."""
        return self._apply(self._plan(rows))

    def _apply(self, plan: _Plan) -> tuple[list[OutboxRow], int]:
        """Dead-letter the plan's rejected rows; its batch and the seq to ack after it."""
        for reason, row in plan.rejects:
            self._dead_letter(reason, [row])
        return plan.batch, plan.upto

    def _plan(self, rows: list[OutboxRow]) -> _Plan:
        """The batch ``rows`` begin with (``_form_batch``), nothing done yet."""
        lim = self.sink.limits
        batch: list[OutboxRow] = []
        rejects: list[tuple[str, OutboxRow]] = []
        size = 2  # "[" and "]"
        upto = rows[0].seq - 1
        for row in rows:
            if row.table not in self.sink.tables:
                if batch:
                    break
                upto = row.seq
                continue
            reason = lim.too_large(row) or self.sink.reject_reason(row)
            if reason is not None:
                if batch:
                    break
                rejects.append((reason, row))
                upto = row.seq
                continue
            if batch and (
                row.table != batch[0].table
                or len(batch) >= lim.max_records
                or size + row.size + 1 > lim.max_bytes
            ):
                break
            batch.append(row)
            size += row.size + 1
            upto = row.seq
        return _Plan(rows, batch, upto, rejects)

    # -- one batch ----------------------------------------------------------------------------

    def _deliver(self, batch: Sequence[OutboxRow]) -> bool:
        """Send until confirmed, split or dead-lettered. False if stopped first."""
        attempt = 0
        while not self.stop_event.is_set():
            outcome: Step | _Retry
            try:
                result = self.sink.send(batch)
            except Exception as exc:  # ``send`` returns its failures: anything raised is a bug
                outcome = self._on_bug(exc, batch, attempt)
            else:
                if result.failure is None and result.delivered != len(batch):
                    outcome = self._on_bug(
                        ValueError(
                            f"send confirmed {result.delivered} of {len(batch)} rows and gave no "
                            f"failure for the rest"
                        ),
                        batch,
                        attempt,
                    )
                elif result.failure is None:
                    self._delivered(batch, result)
                    return True
                else:
                    batch = self._acknowledge_prefix(batch, result)
                    if not batch:  # a failure after the last row: nothing is left to send
                        return True
                    outcome = self._on_failure(result.failure, batch, attempt)
            if outcome is Step.HANDLED:
                return True
            if outcome is Step.SPLIT:
                half = len(batch) // 2
                return self._deliver(batch[:half]) and self._deliver(batch[half:])
            assert isinstance(outcome, _Retry)
            attempt += 1
            if self.clock.wait(self.stop_event, outcome.delay):
                break
        return False

    def _on_failure(
        self, exc: DeliveryError, batch: Sequence[OutboxRow], attempt: int
    ) -> Step | _Retry:
        """What the verdict of a ``DeliveryError`` means for ``batch``: split, dead-letter or
        retry."""
        match exc.verdict:
            case Verdict.SPLIT if len(batch) > 1:
                logs.event(
                    self.log,
                    logging.WARNING,
                    "batch too large; splitting",
                    sink=self.sink.name,
                    records=len(batch),
                    error=str(exc),
                )
                return Step.SPLIT
            case Verdict.SPLIT:  # one record within the size rule: a transient 413, never a loss
                return self._failed(
                    f"refused as too large although within the limit "
                    f"({batch[0].size} bytes): {exc}",
                    batch,
                    backoff.FAST.delay(attempt),
                    attempt,
                )
            case Verdict.DEAD_LETTER:  # the destination is gone: no in-row limit
                self._dead_letter(f"undeliverable: {exc}", batch)
                return Step.HANDLED
            case Verdict.REJECT:
                return self._on_rejected(exc, batch, attempt)
            case Verdict.RETRY | Verdict.SLOW_RETRY if exc.retry_after is not None:
                return self._failed(
                    str(exc), batch, backoff.after_retry_after(exc.retry_after), attempt
                )
            case Verdict.SLOW_RETRY:
                return self._failed(str(exc), batch, backoff.SLOW.delay(attempt), attempt)
        return self._failed(str(exc), batch, backoff.FAST.delay(attempt), attempt)

    def _on_rejected(
        self, exc: DeliveryError, batch: Sequence[OutboxRow], attempt: int
    ) -> Step | _Retry:
        if len(batch) > 1:  # isolate the record the service refuses; send the rest
            return Step.SPLIT
        if self._rejected_in_row < REJECTED_IN_ROW_LIMIT:
            self._rejected_in_row += 1
            self._dead_letter(f"rejected by the service: {exc}", batch)
            return Step.HANDLED
        # Every record is refused: a DCR or contract mismatch, not bad records. Keep them
        # (dead-lettering would empty the outbox) and retry slowly until fixed.
        return self._failed(
            f"the service rejects every record (check the DCR and the contract version): {exc}",
            batch,
            backoff.SLOW.delay(attempt),
            attempt,
        )

    def _on_bug(self, exc: Exception, batch: Sequence[OutboxRow], attempt: int) -> _Retry:
        """A programming error: its traceback once (per distinct error), then the failure line on
        every retry; the slow schedule, since retrying at network pace cannot fix code."""
        error = f"internal error in sink {self.sink.name}: {type(exc).__name__}: {exc}"
        if error != self._bug_logged:
            self._bug_logged = error
            self.log.error(
                "delivery failed: internal error in the sink (please report it)",
                exc_info=exc,
                extra={"fields": {"sink": self.sink.name}},
            )
        return self._failed(error, batch, backoff.SLOW.delay(attempt), attempt)

    def _acknowledge_prefix(
        self, batch: Sequence[OutboxRow], result: SendResult
    ) -> list[OutboxRow]:
        """The sink confirmed the first rows of ``batch``: acknowledge them now, return the rest."""
        done = batch[: result.delivered]
        if done:
            self._delivered(done, result)
            self._ack(done[-1].seq)
        return list(batch[result.delivered :])

    def _delivered(self, rows: Sequence[OutboxRow], result: SendResult) -> None:
        self._rejected_in_row = 0
        self._bug_logged = None
        self._confirmed += [r.seq for r in rows]
        self.stats.delivered += len(rows)
        self.stats.requests += result.requests
        self.stats.bytes_sent += result.bytes_sent
        self.stats.largest_request = max(self.stats.largest_request, result.largest_request)
        self.stats.last_delivery_at = self.clock.wall_seconds()
        self.stats.last_error = None

    def _failed(self, error: str, batch: Sequence[OutboxRow], delay: float, attempt: int) -> _Retry:
        self.stats.failed += 1
        self.stats.last_error = error
        logs.event(
            self.log,
            logging.WARNING,
            "delivery failed; will retry",
            sink=self.sink.name,
            error=error,
            records=len(batch),
            attempt=attempt + 1,
            retry_in=round(delay, 2),
        )
        return _Retry(delay)

    def _dead_letter(self, reason: str, rows: Sequence[OutboxRow]) -> None:
        self.dead_letters.write(self.sink.name, reason, rows)
        self._confirmed += [r.seq for r in rows]
        self.stats.dead_lettered += len(rows)
        logs.event(
            self.log,
            logging.ERROR,
            "records dead-lettered",
            sink=self.sink.name,
            reason=reason,
            records=len(rows),
            file=str(self.dead_letters.path),
        )
