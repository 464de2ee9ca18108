"""The delivery worker's logic against an in-memory scripted sink and the real SQLite outbox:
retries and their schedules, splitting, isolating a refused record, dead letters, partial
delivery acknowledged by the worker (one owner of progress), and a sink's programming error."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
from helpers.scripted_sink import (
    ScriptedSink,
    fails,
    partial,
    record_ids,
    refuse,
    rows,
    too_large_over,
)

from se_forwarder import backoff
from se_forwarder.delivery import DeadLetters, DeliveryWorker
from se_forwarder.errors import DeliveryError, Verdict
from se_forwarder.outbox import Store
from se_forwarder.sinks.base import SendResult
from se_forwarder.sinks.batching import BatchLimits


@pytest.fixture(autouse=True)
def quick_schedules(monkeypatch):
    """Both schedules tiny, so retries take milliseconds; tests that tell them apart set their
    own."""
    monkeypatch.setattr(backoff, "FAST", backoff.Schedule(0.001, 0.001))
    monkeypatch.setattr(backoff, "SLOW", backoff.Schedule(0.002, 0.002))


class Rig:
    def __init__(self, tmp_path, sink: ScriptedSink):
        self.store = Store(tmp_path / "state", durable=False)
        self.store.register_sinks([sink.name])
        self.sink = sink
        self.dead = DeadLetters(tmp_path / "dead-letter.jsonl")
        self.stop = threading.Event()
        self.worker = DeliveryWorker(sink, self.store, self.dead, stop=self.stop)

    def add(self, n: int, **kw) -> None:
        self.store.commit("state", {}, rows(n, **kw))

    def drain(self, timeout: float = 10.0) -> None:
        """Run the worker until the outbox is empty for the sink, then stop it."""
        self.worker.draining.set()
        self.worker.start()
        self.worker.join(timeout)
        assert not self.worker.is_alive(), "the worker did not finish"

    def dead_letters(self) -> list[dict]:
        if not self.dead.path.exists():
            return []
        return [json.loads(line) for line in self.dead.path.read_text().splitlines()]

    def close(self) -> None:
        self.stop.set()
        self.worker.notify()
        self.worker.join(5)
        self.store.close()


@pytest.fixture
def rig(tmp_path):
    made = []

    def make(sink: ScriptedSink) -> Rig:
        r = Rig(tmp_path, sink)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def test_transient_errors_are_retried_in_order_and_nothing_is_lost(rig):
    sink = ScriptedSink([fails(Verdict.RETRY, "503"), fails(Verdict.RETRY, "timeout"), None])
    r = rig(sink)
    r.add(5)
    r.drain()
    assert sink.attempts == [[1, 2, 3, 4, 5]] * 3
    assert record_ids(sink.delivered) == [f"r{i}" for i in range(1, 6)]
    assert r.worker.stats.failed == 2 and r.worker.stats.delivered == 5
    assert r.store.depth(sink.name) == 0 and r.dead_letters() == []


def test_retry_after_is_used_instead_of_the_schedule(rig, monkeypatch, caplog):
    monkeypatch.setattr(backoff, "FAST", backoff.Schedule(100, 100))  # would stall the test
    sink = ScriptedSink([fails(Verdict.RETRY, "throttled", retry_after=0.2), None])
    r = rig(sink)
    r.add(1)
    with caplog.at_level(logging.WARNING, logger="se_forwarder"):
        r.drain()
    [line] = [x for x in caplog.records if x.getMessage() == "delivery failed; will retry"]
    assert 0.2 <= line.fields["retry_in"] <= 0.22  # Retry-After plus at most 10 % jitter


def test_a_batch_too_large_is_split_until_it_fits(rig):
    sink = ScriptedSink(default=too_large_over(2))
    r = rig(sink)
    r.add(8)
    r.drain()
    assert record_ids(sink.delivered) == [f"r{i}" for i in range(1, 9)]
    sent = [a for a in sink.attempts if len(a) <= 2]
    assert sorted(seq for a in sent for seq in a) == list(range(1, 9)) and r.dead_letters() == []


def test_a_single_record_over_the_limit_is_dead_lettered_unsent_and_the_rest_delivered(rig):
    limits = BatchLimits(
        max_records=100, max_bytes=100_000, linger_seconds=0.0, max_record_bytes=400
    )
    sink = ScriptedSink(limits=limits)
    r = rig(sink)
    r.add(2)
    r.add(1, start=3, size=450)
    r.add(2, start=4)
    r.drain()
    assert record_ids(sink.delivered) == ["r1", "r2", "r4", "r5"]
    assert all(3 not in a for a in sink.attempts)  # never sent
    [dead] = r.dead_letters()
    assert dead["seq"] == 3 and "over the 400-byte limit" in dead["reason"]
    assert dead["record"]["RecordId"] == "r3"
    assert r.worker.stats.dead_lettered == 1 and r.store.depth(sink.name) == 0


def test_a_transient_413_for_a_record_within_the_limit_is_retried_never_dead_lettered(rig):
    """40 s of 413s must not send records that fit the limit to the dead-letter file."""
    storm = [fails(Verdict.SPLIT, "413 Request Entity Too Large")] * 12
    sink = ScriptedSink(storm)
    r = rig(sink)
    r.add(4)
    r.drain()
    assert r.dead_letters() == [] and record_ids(sink.delivered) == ["r1", "r2", "r3", "r4"]
    assert r.worker.stats.failed > 0 and r.worker.stats.dead_lettered == 0


def test_a_refused_record_is_isolated_and_only_it_is_dead_lettered(rig):
    sink = ScriptedSink(default=refuse(6))
    r = rig(sink)
    r.add(10)
    r.drain()
    assert record_ids(sink.delivered) == [f"r{i}" for i in range(1, 11) if i != 6]
    assert [d["seq"] for d in r.dead_letters()] == [6]


def test_a_service_refusing_everything_keeps_the_records(rig, monkeypatch):
    from se_forwarder.delivery import worker

    monkeypatch.setattr(worker, "REJECTED_IN_ROW_LIMIT", 2)
    sink = ScriptedSink(default=fails(Verdict.REJECT, "schema mismatch"))
    r = rig(sink)
    r.add(6)
    r.worker.start()
    deadline = time.monotonic() + 5
    while r.worker.stats.failed < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(r.dead_letters()) == 2  # the guard stopped dead-lettering
    assert "rejects every record" in r.worker.stats.last_error
    assert r.store.depth(sink.name) == 6  # nothing acknowledged while the batch is retried
    sink.default = None  # fixed: the rest goes through
    deadline = time.monotonic() + 5
    while r.store.depth(sink.name) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert r.store.depth(sink.name) == 0 and len(sink.delivered) == 4


def test_a_partial_delivery_is_acknowledged_by_the_worker_and_the_rest_retried(rig):
    sink = ScriptedSink([partial(3), fails(Verdict.RETRY, "again"), None])
    r = rig(sink)
    r.add(7)
    r.drain()
    assert sink.attempts == [[1, 2, 3, 4, 5, 6, 7], [4, 5, 6, 7], [4, 5, 6, 7]]
    # The sink confirmed 1-3 in the first attempt: only 4-7 are sent again, nothing twice.
    assert record_ids(sink.delivered) == [f"r{i}" for i in range(1, 8)]
    assert r.worker.stats.delivered == 7 and r.store.depth(sink.name) == 0


def test_the_prefix_of_a_partial_delivery_is_acknowledged_at_once(rig):
    """A stop right after a partial delivery keeps only the unconfirmed rows in the outbox."""
    stop_after = threading.Event()

    def then_hang(batch):
        stop_after.set()
        return fails(Verdict.RETRY, "down")

    sink = ScriptedSink([partial(2)], default=then_hang)
    r = rig(sink)
    r.add(5)
    r.worker.start()
    assert stop_after.wait(5)
    r.stop.set()
    r.worker.join(5)
    assert r.store.depth(sink.name) == 3


def test_a_programming_error_in_a_sink_is_logged_once_with_its_traceback_and_retried_slowly(
    rig, monkeypatch, caplog
):
    monkeypatch.setattr(backoff, "FAST", backoff.Schedule(100, 100))  # the wrong schedule stalls
    bug = TypeError("unsupported operand type(s) for +: 'int' and 'str'")
    sink = ScriptedSink([bug, bug, bug, None])
    r = rig(sink)
    r.add(2)
    with caplog.at_level(logging.WARNING, logger="se_forwarder"):
        r.drain()
    tracebacks = [x for x in caplog.records if x.exc_info]
    assert len(tracebacks) == 1 and tracebacks[0].exc_info[0] is TypeError
    retries = [x for x in caplog.records if x.getMessage() == "delivery failed; will retry"]
    assert len(retries) == 3 and all("internal error in sink" in x.fields["error"] for x in retries)
    assert all(x.fields["retry_in"] <= backoff.SLOW.cap for x in retries)
    assert r.worker.stats.failed == 3 and len(sink.delivered) == 2


def test_a_failure_is_returned_never_raised_so_a_raised_one_is_a_bug(rig, monkeypatch, caplog):
    """One failure path: ``send`` returns its failure in the ``SendResult``. A sink that raises a
    ``DeliveryError`` instead breaks the contract: it is a programming error (traceback, slow
    schedule), never acted on by its verdict (this dead-letter verdict would lose the rows)."""
    monkeypatch.setattr(backoff, "FAST", backoff.Schedule(100, 100))  # the wrong schedule stalls

    def raises(batch):
        raise fails(Verdict.DEAD_LETTER, "gone")

    sink = ScriptedSink([raises, None])
    r = rig(sink)
    r.add(2)
    with caplog.at_level(logging.WARNING, logger="se_forwarder"):
        r.drain()
    assert [x.exc_info[0] for x in caplog.records if x.exc_info] == [DeliveryError]
    assert r.worker.stats.dead_lettered == 0 and len(sink.delivered) == 2
    assert r.worker.stats.failed == 1


def test_a_programming_error_shows_as_a_sink_failure_until_it_is_gone(rig):
    block = threading.Event()

    def bug(batch):
        block.set()
        raise KeyError("Table")

    sink = ScriptedSink(default=bug)
    r = rig(sink)
    r.add(1)
    r.worker.start()
    assert block.wait(5)
    deadline = time.monotonic() + 5
    while r.worker.stats.failed == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert r.worker.stats.failed >= 1
    assert r.worker.stats.last_error.startswith("internal error in sink scripted: KeyError")


def test_rows_of_a_table_the_sink_does_not_take_are_skipped_not_sent(rig):
    sink = ScriptedSink(tables=frozenset({"records"}))
    r = rig(sink)
    r.add(2)
    r.add(2, start=3, table="heartbeats")
    r.add(1, start=5)
    r.drain()
    assert record_ids(sink.delivered) == ["r1", "r2", "r5"] and r.store.depth(sink.name) == 0


def test_batches_respect_the_count_and_byte_limits(rig):
    sink = ScriptedSink(limits=BatchLimits(max_records=3, max_bytes=250, linger_seconds=0.0))
    r = rig(sink)
    r.add(10, size=60)
    r.drain()
    assert all(len(a) <= 3 for a in sink.attempts)
    assert record_ids(sink.delivered) == [f"r{i}" for i in range(1, 11)]


def test_batches_stay_full_when_the_rows_fetched_by_bytes_turn_smaller(rig):
    """The worker reads about a batch's worth of rows by bytes (sized on the last rows), not
    ``max_records``: when the rows shrink, it reads again by count, so every batch is still as
    full as the limits allow (greedy, in order), and a drain takes no more requests."""
    sink = ScriptedSink(limits=BatchLimits(max_records=500, max_bytes=60_000, linger_seconds=0.0))
    r = rig(sink)
    sizes = [1000] * 150 + [60] * 1200 + [1000] * 30
    start = 1
    for size, n in ((1000, 150), (60, 1200), (1000, 30)):
        r.add(n, start=start, size=size)
        start += n
    r.drain()
    actual = [len(row.payload) for row in sink.delivered]
    assert actual[0] > 900 and actual[200] < 100  # large rows, then small ones
    expected, batch, used = [], 0, 2
    for size in actual:
        if batch and (batch >= 500 or used + size + 1 > 60_000):
            expected.append(batch)
            batch, used = 0, 2
        batch, used = batch + 1, used + size + 1
    expected.append(batch)
    assert [len(a) for a in sink.attempts] == expected
    assert record_ids(sink.delivered) == [f"r{i}" for i in range(1, len(sizes) + 1)]


def test_the_sink_is_closed_when_the_worker_ends(rig):
    sink = ScriptedSink()
    r = rig(sink)
    r.drain()
    assert sink.closed


class Fixed(backoff.Schedule):
    """A schedule without jitter, so a test can tell which one was used."""

    def delay(self, attempt: int) -> float:
        return self.base


def test_a_slow_retry_takes_the_slow_schedule_and_a_retry_the_fast_one(rig, monkeypatch, caplog):
    monkeypatch.setattr(backoff, "FAST", Fixed(0.001, 0.001))
    monkeypatch.setattr(backoff, "SLOW", Fixed(0.02, 0.02))
    sink = ScriptedSink([fails(Verdict.SLOW_RETRY, "403"), fails(Verdict.RETRY, "503"), None])
    r = rig(sink)
    r.add(1)
    with caplog.at_level(logging.WARNING, logger="se_forwarder"):
        r.drain()
    delays = [
        x.fields["retry_in"]
        for x in caplog.records
        if x.getMessage() == "delivery failed; will retry"
    ]
    assert delays == [0.02, 0.0]  # slow, then fast (logged to the hundredth)
    assert record_ids(sink.delivered) == ["r1"]


def test_a_dead_letter_verdict_dead_letters_the_batch_at_once_with_no_in_row_limit(
    rig, monkeypatch
):
    from se_forwarder.delivery import worker

    monkeypatch.setattr(worker, "REJECTED_IN_ROW_LIMIT", 1)
    sink = ScriptedSink(
        default=fails(Verdict.DEAD_LETTER, "gone"),
        limits=BatchLimits(max_records=1, linger_seconds=0.0),
    )
    r = rig(sink)
    r.add(3)
    r.drain()
    assert [d["seq"] for d in r.dead_letters()] == [1, 2, 3] and sink.delivered == []
    assert all(d["reason"].startswith("undeliverable: gone") for d in r.dead_letters())
    assert sink.attempts == [[1], [2], [3]] and r.store.depth(sink.name) == 0


def test_the_counters_are_what_the_sink_s_results_say(rig):
    results = [
        SendResult(
            delivered=2,
            requests=1,
            bytes_sent=300,
            largest_request=300,
            failure=fails(Verdict.RETRY, "second transfer"),
        ),
        SendResult(delivered=3, requests=2, bytes_sent=500, largest_request=400),
    ]
    sink = ScriptedSink([lambda batch: results[0], lambda batch: results[1]])
    r = rig(sink)
    r.add(5)
    r.drain()
    st = r.worker.stats
    assert (st.delivered, st.requests, st.bytes_sent, st.largest_request) == (5, 3, 800, 400)
    assert sink.attempts == [[1, 2, 3, 4, 5], [3, 4, 5]] and st.failed == 1


def test_a_result_missing_rows_without_a_failure_is_a_bug_not_a_delivery(rig, caplog):
    sink = ScriptedSink([lambda batch: SendResult(delivered=1, requests=1)])
    r = rig(sink)
    r.add(3)
    with caplog.at_level(logging.WARNING, logger="se_forwarder"):
        r.drain()
    assert sink.attempts == [[1, 2, 3], [1, 2, 3]]  # nothing acknowledged on a doubtful result
    assert any(
        "confirmed 1 of 3 rows" in x.fields.get("error", "")
        for x in caplog.records
        if hasattr(x, "fields")
    )


# -- a backlog: the outbox's part of a round beside the send ---------------------------------------

TENS = BatchLimits(max_records=10, max_bytes=100_000, linger_seconds=0.0)


class PreparingSink(ScriptedSink):
    """A scripted sink that records what it was given to prepare, and checks at each send that
    no other send is under way (sends are one at a time, in order)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.prepared: list[list[int]] = []
        self.in_flight = 0
        self.overlapped = False

    def prepare(self, batch):
        with self._lock:
            self.prepared.append([r.seq for r in batch])

    def send(self, batch):
        with self._lock:
            self.in_flight += 1
            self.overlapped |= self.in_flight > 1
        try:
            time.sleep(0.002)  # the answer takes a while: the next batch is read meanwhile
            return super().send(batch)
        finally:
            with self._lock:
                self.in_flight -= 1


def test_with_a_backlog_no_row_is_acknowledged_or_deleted_before_its_send_confirmed_it(rig):
    """While each batch is sent, every row from its first on is still in the outbox and behind
    the cursor (the last batch's acknowledgement and the next batch's reading happen beside
    the send); at the end, everything confirmed is acknowledged."""
    seen: list[tuple[int, int, int]] = []

    def check(batch):
        first = r.store.fetch(sink.name, 1, after=0)[0].seq  # the oldest row still spooled
        seen.append((batch[0].seq, first, r.store.depth(sink.name)))

    sink = PreparingSink(limits=TENS, default=check)
    r = rig(sink)
    r.add(95)
    r.drain()
    assert len(seen) == 10
    for batch_first, oldest, depth in seen:
        assert oldest <= batch_first  # nothing of this batch (or after it) deleted
        assert depth >= 95 - batch_first + 1  # the cursor is not past any of its rows
    assert record_ids(sink.delivered) == [f"r{i}" for i in range(1, 96)]
    assert not sink.overlapped
    assert r.store.depth(sink.name) == 0 and r.store.fetch(sink.name, 1, after=0) == []


def test_with_a_backlog_the_sink_prepares_exactly_the_batch_it_sends_next(rig):
    sink = PreparingSink(limits=TENS)
    r = rig(sink)
    r.add(35)
    r.drain()
    assert sink.attempts == [list(range(s, min(s + 10, 36))) for s in range(1, 36, 10)]
    # each full batch had the next one read and prepared beside its send
    assert sink.prepared == sink.attempts[1:]


def test_failures_in_a_backlog_keep_the_order_and_send_nothing_twice_once_confirmed(rig):
    """A retried batch, a partial delivery and a split while the next batch was read ahead: the
    service receives every record once, in order, and the read-ahead batch waits its turn."""
    sink = PreparingSink(
        [
            None,
            fails(Verdict.RETRY, "busy"),
            partial(4),
            None,
            fails(Verdict.SPLIT, "too large"),
        ],
        limits=TENS,
    )
    r = rig(sink)
    r.add(45)
    r.drain()
    assert record_ids(sink.delivered) == [f"r{i}" for i in range(1, 46)]
    assert sink.attempts[:6] == [
        list(range(1, 11)),
        list(range(11, 21)),  # busy: again
        list(range(11, 21)),  # 11-14 confirmed
        list(range(15, 21)),
        list(range(21, 31)),  # too large: halves
        list(range(21, 26)),
    ]
    assert not sink.overlapped and r.store.depth(sink.name) == 0


def test_a_stop_in_a_backlog_acknowledges_what_was_confirmed_and_nothing_else(rig):
    sent = threading.Event()

    def then_down(batch):
        sent.set()
        return fails(Verdict.RETRY, "down")

    sink = PreparingSink([None, None, partial(3)], limits=TENS, default=then_down)
    r = rig(sink)
    r.add(50)
    r.worker.start()
    assert sent.wait(5)
    r.stop.set()
    r.worker.join(5)
    assert not r.worker.is_alive()
    # 1-20 and 21-23 confirmed: acknowledged (not sent again next run); 24-50 kept
    assert r.store.depth(sink.name) == 27
    assert r.store.fetch(sink.name, 1)[0].seq == 24


def test_a_sink_failing_to_prepare_is_logged_once_and_its_batches_still_delivered(rig, caplog):
    class Broken(PreparingSink):
        def prepare(self, batch):
            raise TypeError("prepare is broken")

    sink = Broken(limits=TENS)
    r = rig(sink)
    r.add(45)
    with caplog.at_level(logging.ERROR, logger="se_forwarder"):
        r.drain()
    assert record_ids(sink.delivered) == [f"r{i}" for i in range(1, 46)]
    assert r.worker.stats.failed == 0 and r.store.depth(sink.name) == 0
    lines = [x for x in caplog.records if "preparing a batch failed" in x.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is not None


def test_a_row_dead_lettered_ahead_of_a_short_batch_is_dead_lettered_once(rig):
    """A row that can never be sent, then a short batch, with lingering on: the row is
    dead-lettered once and the batch behind it is sent without lingering (a row that cannot join
    it ends it), then the records that arrive later: none is looked at twice."""
    limits = BatchLimits(
        max_records=100, max_bytes=100_000, linger_seconds=1.0, max_record_bytes=400
    )
    sink = ScriptedSink(limits=limits)
    r = rig(sink)
    r.add(1, size=450)
    r.add(1, start=2)
    r.worker.start()
    deadline = time.monotonic() + 10
    while not r.dead_letters():  # the first look dead-lettered it and lingers
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for seq in (3, 4):  # each arrival wakes the lingering worker: it looks again
        r.add(1, start=seq)
        r.worker.notify()
        time.sleep(0.1)
    r.worker.draining.set()
    r.worker.notify()
    r.worker.join(10)
    assert not r.worker.is_alive(), "the worker did not finish"
    assert [d["seq"] for d in r.dead_letters()] == [1]
    assert r.worker.stats.dead_lettered == 1
    assert record_ids(sink.delivered) == ["r2", "r3", "r4"] and r.store.depth(sink.name) == 0
