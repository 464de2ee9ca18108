"""The delivery worker (``se_forwarder.delivery``) with the real store and the real Azure sinks,
against the stand-ins: batching limits, 413 split, dead letters, Retry-After, backoff, order,
several sinks at once, drain and stop. The workers wait on a FakeClock: linger, backoff and
Retry-After take fake time (the real schedules, exactly), the SDKs' requests their real time."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from helpers.azure import RECORDS, VM_ID, AzureWorld, compact, heartbeat, record

from se_forwarder import backoff
from se_forwarder.delivery import DeadLetters, DeliveryWorker
from se_forwarder.outbox import OutboxRow, Store
from se_forwarder.sinks.batching import BatchLimits
from se_forwarder_testbed.fakeclock import FakeClock
from se_forwarder_testbed.standins.logs_ingestion import LogsIngestionStandIn

pytestmark = [pytest.mark.e2e, pytest.mark.tls]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with AzureWorld(tmp_path_factory.mktemp("delivery")) as w:
        yield w


@pytest.fixture
def clean(world):
    world.clean()
    yield world
    world.clean()


class Rig:
    """A store with one worker per sink, as the agent wires them."""

    def __init__(
        self, directory: Path, sinks: list, clock: FakeClock, *, max_bytes: int = 64 * 1024 * 1024
    ) -> None:
        self.clock = clock
        self.store = Store(directory, max_bytes=max_bytes, durable=False)
        self.store.register_sinks([s.name for s in sinks])
        self.dead = DeadLetters(directory / "dead-letter.jsonl", clock)
        self.stop = clock.event()
        self.workers = {
            s.name: DeliveryWorker(s, self.store, self.dead, stop=self.stop, clock=clock)
            for s in sinks
        }
        self.seq_records: list[dict] = []

    def add(self, recs: list[dict], table: str = "records") -> None:
        self.store.commit("state", {}, [OutboxRow.raw(table, VM_ID, compact(r)) for r in recs])
        self.seq_records.extend(recs)
        for w in self.workers.values():
            w.notify()

    def start(self) -> Rig:
        for w in self.workers.values():
            self.clock.track(w)
            w.start()
        return self

    def until(self, check, seconds: float = 60, what: str = "condition"):
        """Run the clock until ``check()`` is truthy, for at most ``seconds`` fake seconds."""
        assert self.clock.run_until(check, seconds), f"timed out waiting for {what}"
        return check()

    def close(self) -> None:
        self.stop.set()
        for w in self.workers.values():
            w.notify()
            if w.is_alive():
                w.join(10)
        self.store.close()

    def dead_letters(self) -> list[dict]:
        if not self.dead.path.exists():
            return []
        return [json.loads(line) for line in self.dead.path.read_text().splitlines()]


@pytest.fixture
def rigs(tmp_path, clock):
    made: list[Rig] = []

    def make(sinks, **kw) -> Rig:
        rig = Rig(tmp_path / f"state{len(made)}", sinks, clock, **kw)
        made.append(rig)
        return rig

    yield make
    for rig in made:
        rig.close()


def ids(recs) -> list[str]:
    return [r["RecordId"] for r in recs]


def test_batches_respect_the_count_limit_and_arrive_in_order(clean, rigs):
    sink = clean.la_sink()
    sink.limits = BatchLimits(max_records=40, max_bytes=sink.limits.max_bytes, linger_seconds=0.05)
    rig = rigs([sink])
    recs = [record(i) for i in range(300)]
    rig.add(recs)
    rig.start()
    rig.until(lambda: len(clean.la.records(RECORDS)) >= 300, what="300 records")
    assert ids(clean.la.records(RECORDS)) == ids(recs)
    sizes = [h.records for h in clean.la.history()]
    assert max(sizes) <= 40 and sum(sizes) == 300 and len(sizes) == 8
    rig.until(lambda: rig.store.depth("log_analytics") == 0, what="cursor acknowledged")


def test_batches_respect_the_byte_limit_at_1_mb(clean, rigs):
    sink = clean.la_sink()
    rig = rigs([sink])
    recs = [record(i, pad=3000) for i in range(1200)]  # ~4 MB of records
    rig.add(recs)
    rig.start()
    rig.until(lambda: len(clean.la.records(RECORDS)) >= 1200, what="1200 records")
    st = clean.la.stats(RECORDS)
    assert st.max_uncompressed <= 1_000_000 and st.max_compressed <= 1_000_000
    assert 4 <= st.requests <= 6  # full batches, not one per record
    assert ids(clean.la.records(RECORDS)) == ids(recs)


def test_linger_gathers_records_into_one_batch(clean, rigs):
    sink = clean.la_sink()
    sink.limits = BatchLimits(max_records=1000, max_bytes=sink.limits.max_bytes, linger_seconds=2.0)
    rig = rigs([sink]).start()
    for i in range(5):  # trickling in faster than the linger
        rig.add([record(i)])
        rig.clock.advance(0.05)
    rig.until(lambda: len(clean.la.records(RECORDS)) >= 5, what="5 records")
    assert [h.records for h in clean.la.history()] == [5]


def test_a_413_splits_the_batch_until_it_fits(clean, rigs, tmp_path):
    small = LogsIngestionStandIn(
        tmp_path / "tls-small", clean.authority, max_body_bytes=20_000
    ).start()
    try:
        from se_forwarder.identity import credential as identity
        from se_forwarder.identity.config import IdentityConfig
        from se_forwarder.sinks.log_analytics.sink import LogAnalyticsSink

        sink = LogAnalyticsSink(
            small.endpoint,
            small.dcr_id,
            identity.build(IdentityConfig()),
            ca_file=str(small.ca_cert),
            timeout=5,
        )
        rig = rigs([sink])
        recs = [record(i, pad=500) for i in range(100)]  # ~150 KB: over the 20 KB limit
        rig.add(recs)
        rig.start()
        rig.until(lambda: len(small.records(RECORDS)) >= 100, what="100 records")
        statuses = [h.status for h in small.history()]
        assert 413 in statuses and statuses[-1] == 204
        assert ids(small.records(RECORDS)) == ids(recs)  # in order, none twice
        assert rig.dead_letters() == []
    finally:
        small.stop()


def test_a_record_too_large_is_dead_lettered_once_and_does_not_block(clean, rigs, caplog):
    sink = clean.la_sink()
    sink.limits = BatchLimits(
        max_records=1000, max_bytes=sink.limits.max_bytes, linger_seconds=0.05
    )
    rig = rigs([sink])
    big = record(5, Description="x" * (70 * 1024))
    recs = [record(i) for i in range(5)] + [big] + [record(i) for i in range(6, 10)]
    with caplog.at_level("ERROR", logger="se_forwarder"):
        rig.add(recs)
        rig.start()
        rig.until(lambda: len(clean.la.records(RECORDS)) >= 9, what="9 records")
        rig.until(lambda: rig.store.depth("log_analytics") == 0, what="all acknowledged")
    assert ids(clean.la.records(RECORDS)) == ids(recs[:5] + recs[6:])
    [dl] = rig.dead_letters()
    assert dl["record"]["RecordId"] == big["RecordId"] and "Description" in dl["reason"]
    assert dl["sink"] == "log_analytics"
    lines = [r for r in caplog.records if r.getMessage() == "records dead-lettered"]
    assert len(lines) == 1 and lines[0].fields["records"] == 1


def test_a_schema_rejection_dead_letters_only_the_refused_record(clean, rigs):
    sink = clean.la_sink()
    sink.limits = BatchLimits(max_records=3, max_bytes=sink.limits.max_bytes, linger_seconds=0.05)
    rig = rigs([sink])
    recs = [record(0), record(1), record(2, Bogus=True), record(3), record(4)]
    rig.add(recs)
    rig.start()
    rig.until(lambda: len(clean.la.records(RECORDS)) >= 4, what="4 records")
    rig.until(lambda: rig.store.depth("log_analytics") == 0, what="queue drained")
    # The rejected batch is split until the one bad record is alone; the rest arrive in order.
    assert ids(clean.la.records(RECORDS)) == ids(recs[:2] + recs[3:])
    dls = rig.dead_letters()
    assert [d["record"]["RecordId"] for d in dls] == ids(recs[2:3])
    assert "Bogus" in dls[0]["reason"]


def test_a_service_that_rejects_everything_keeps_the_records(clean, rigs, monkeypatch):
    from se_forwarder.delivery import worker

    monkeypatch.setattr(worker, "REJECTED_IN_ROW_LIMIT", 2)
    sink = clean.la_sink()
    sink.limits = BatchLimits(max_records=1, max_bytes=sink.limits.max_bytes, linger_seconds=0)
    rig = rigs([sink])
    rig.add([record(i, Bogus=True) for i in range(6)])
    rig.start()
    worker = rig.workers["log_analytics"]
    rig.until(lambda: worker.stats.failed >= 2, what="slow retries")
    # Two records were dead-lettered, then the worker concluded the service refuses everything
    # and kept the rest in the outbox, retrying, instead of emptying it into the file.
    assert len(rig.dead_letters()) == 2
    assert rig.store.depth("log_analytics") == 4
    assert "rejects every record" in worker.stats.last_error


def test_retry_after_is_honoured(clean, rigs):
    sink = clean.la_sink()
    sink.limits = BatchLimits(max_records=1000, max_bytes=sink.limits.max_bytes, linger_seconds=0)
    rig = rigs([sink])
    clean.la.throttle_next(1, retry_after=1.5)
    rig.add([record(1)])
    rig.start()
    rig.until(clean.la.history, what="the 429")
    throttled = rig.clock.monotonic()
    rig.until(lambda: len(clean.la.records(RECORDS)) >= 1, what="the record")
    assert [h.status for h in clean.la.history()] == [429, 204]
    gap = rig.clock.monotonic() - throttled  # fake seconds, exactly as the worker waited
    assert 1.5 <= gap <= 1.65 + 1e-6, gap  # Retry-After plus at most 10 % jitter
    assert rig.workers["log_analytics"].stats.failed == 1


def test_errors_back_off_and_the_batch_is_resent_until_confirmed(clean, rigs):
    sink = clean.la_sink(timeout=1.0)
    sink.limits = BatchLimits(max_records=1000, max_bytes=sink.limits.max_bytes, linger_seconds=0)
    rig = rigs([sink])
    clean.la.fail_next(2, 503)
    clean.la.throttle_next(1, retry_after=None)  # 429 without Retry-After: our backoff
    clean.la.drop_next(1)
    clean.la.fail_next(1, 500)
    recs = [record(i) for i in range(10)]
    rig.add(recs)
    rig.start()
    rig.until(lambda: len(clean.la.records(RECORDS)) >= 10, what="10 records")
    rig.until(lambda: rig.store.depth("log_analytics") == 0, what="cursor acknowledged")
    assert [h.status for h in clean.la.history()] == [503, 503, 429, 0, 500, 204]
    assert ids(clean.la.records(RECORDS)) == ids(recs)
    stats = rig.workers["log_analytics"].stats
    assert stats.failed == 5 and stats.delivered == 10 and stats.last_error is None


def test_backoff_is_exponential_with_full_jitter_and_a_cap():
    for attempt in range(12):
        values = [backoff.FAST.delay(attempt) for _ in range(200)]
        bound = min(backoff.FAST.cap, backoff.FAST.base * 2**attempt)
        assert all(0 <= v <= bound for v in values)
        assert max(values) > bound * 0.7  # jitter spans the range
    slow = [backoff.SLOW.delay(0) for _ in range(200)]
    assert max(slow) > backoff.FAST.base and max(slow) <= backoff.SLOW.base


def test_auth_failure_keeps_retrying_until_the_role_is_granted(clean, rigs, caplog):
    clean.la.set_allowed_subjects({"someone-else"})
    sink = clean.la_sink()
    rig = rigs([sink])
    recs = [record(i) for i in range(3)]
    with caplog.at_level("WARNING", logger="se_forwarder"):
        rig.add(recs)
        rig.start()
        t0 = rig.clock.monotonic()
        rig.until(lambda: len(clean.la.history()) >= 3, 200, what="three refused attempts")
        assert clean.la.records(RECORDS) == []
        # on the slow schedule: at most 15 s, then 30 s between the first three attempts
        assert rig.clock.monotonic() - t0 <= backoff.SLOW.base * 3
        clean.la.set_allowed_subjects(None)
        rig.until(lambda: len(clean.la.records(RECORDS)) >= 3, 200, what="3 records")
    fails = [r for r in caplog.records if r.getMessage() == "delivery failed; will retry"]
    assert fails and all("Monitoring Metrics Publisher" in r.fields["error"] for r in fails)
    assert ids(clean.la.records(RECORDS)) == ids(recs)


def test_event_hubs_worker_retries_rejections_and_keeps_order(clean, rigs):
    sink = clean.eh_sink()
    sink.limits = BatchLimits(max_records=25, max_bytes=sink.limits.max_bytes, linger_seconds=0)
    rig = rigs([sink])
    recs = [record(i) for i in range(100)]
    rig.add(recs)
    rig.add([heartbeat(1)], table="heartbeats")
    clean.eh.reject_next(4)
    rig.start()
    got = rig.until(lambda: len(clean.eh.events) >= 101 and clean.eh.events, what="101 events")
    bodies = [json.loads(e.body) for e in got]
    assert ids(bodies) == [*ids(recs), heartbeat(1)["RecordId"]]
    assert {e.partition_key for e in got} == {VM_ID} and len({e.partition_id for e in got}) == 1
    assert got[-1].properties["Table"] == "ScheduledEventsAgent"


def test_one_sink_down_never_holds_back_the_other(clean, rigs):
    la, eh = clean.la_sink(), clean.eh_sink(timeout=1.0)
    for s in (la, eh):
        s.limits = BatchLimits(max_records=50, max_bytes=s.limits.max_bytes, linger_seconds=0.05)
    rig = rigs([la, eh])
    clean.eh.reject_next(10_000)  # Event Hubs down
    rig.start()
    recs = [record(i) for i in range(200)]
    rig.add(recs)
    rig.until(lambda: len(clean.la.records(RECORDS)) >= 200, what="200 records")
    rig.until(lambda: rig.store.depth("log_analytics") == 0, what="LA cursor acknowledged")
    assert ids(clean.la.records(RECORDS)) == ids(recs)
    assert clean.eh.events == [] and rig.store.depth("event_hubs") == 200
    clean.eh.clear_faults()  # it comes back and catches up, in order
    got = rig.until(
        lambda: len(clean.eh.events) >= 200 and clean.eh.events, 300, what="200 events"
    )  # at the next retry: the backoff is at most a minute
    assert ids(json.loads(e.body) for e in got) == ids(recs)
    rig.until(lambda: rig.store.depth("event_hubs") == 0, what="EH cursor acknowledged")


def test_drain_sends_without_lingering_then_exits(clean, rigs):
    sink = clean.la_sink()
    sink.limits = BatchLimits(max_records=1000, max_bytes=sink.limits.max_bytes, linger_seconds=30)
    rig = rigs([sink])
    rig.add([record(i) for i in range(7)])
    w = rig.workers["log_analytics"]
    w.draining.set()
    rig.start()
    t0 = rig.clock.monotonic()
    rig.until(lambda: not w.is_alive(), 5, what="the worker to end")
    assert rig.clock.monotonic() - t0 == 0  # it did not linger
    assert len(clean.la.records(RECORDS)) == 7 and rig.store.depth("log_analytics") == 0


def test_stop_while_retrying_keeps_the_records_for_the_next_run(clean, rigs, tmp_path):
    sink = clean.la_sink()
    sink.limits = BatchLimits(max_records=1000, max_bytes=sink.limits.max_bytes, linger_seconds=0)
    rig = rigs([sink])
    clean.la.fail_next(None, 503)
    recs = [record(i) for i in range(4)]
    rig.add(recs)
    rig.start()
    rig.until(clean.la.history, what="a failed attempt")
    rig.stop.set()
    w = rig.workers["log_analytics"]
    w.notify()
    w.join(5)
    assert not w.is_alive()
    assert rig.store.depth("log_analytics") == 4  # nothing acknowledged
    state_dir = rig.store.dir
    rig.store.close()
    clean.la.clear_faults()
    # the next run: a new store on the same directory, a new worker, the same records
    store = Store(state_dir, durable=False)
    try:
        store.register_sinks(["log_analytics"])
        clock = rig.clock
        w2 = DeliveryWorker(
            clean.la_sink(),
            store,
            DeadLetters(tmp_path / "dl2.jsonl", clock),
            stop=clock.event(),
            clock=clock,
        )
        w2.draining.set()
        clock.track(w2)
        w2.start()
        rig.until(lambda: not w2.is_alive(), 10, what="the next run's worker to drain")
        assert ids(clean.la.records(RECORDS)) == ids(recs)
        assert store.depth("log_analytics") == 0
    finally:
        store.close()
    rig.store = Store(state_dir, durable=False)  # for the fixture's close()


def test_a_store_error_does_not_kill_the_worker(clean, rigs):
    """Another process holds the database locked past the busy timeout while the worker
    acknowledges: it logs, backs off and carries on (the batch is sent again: at-least-once)."""
    sink = clean.la_sink()
    sink.limits = BatchLimits(max_records=10, max_bytes=sink.limits.max_bytes, linger_seconds=0)
    rig = rigs([sink])
    worker = rig.workers["log_analytics"]
    other = sqlite3.connect(rig.store.path, isolation_level=None)
    rig.add([record(1)])
    other.execute("BEGIN EXCLUSIVE")  # the worker can still read (WAL) but not acknowledge
    try:
        rig.start()
        rig.until(
            lambda: worker.stats.last_error and "locked" in worker.stats.last_error,
            20,
            what="the acknowledgement to fail",
        )
    finally:
        other.execute("ROLLBACK")
        other.close()
    rig.until(lambda: rig.store.depth("log_analytics") == 0, what="the worker to recover")
    assert worker.is_alive()
    assert ids(clean.la.records(RECORDS)).count(record(1)["RecordId"]) >= 2  # sent again
    rig.add([record(2)])
    rig.until(lambda: record(2)["RecordId"] in ids(clean.la.records(RECORDS)), what="new records")
