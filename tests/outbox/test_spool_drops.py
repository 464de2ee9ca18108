"""The spool bound's count is exact (issue 18: 318 rows really lost, the log and the database
counter said 345: rows Log Analytics had already accepted were counted as dropped). A dropped row
counts as lost only for a sink that takes its table and never confirmed it; a row a sink was
sending when the bound dropped it counts only if that sink does not confirm it; a row whose
answer a kill -9 cut off counts as lost at the next start (nothing says it arrived)."""

from __future__ import annotations

import json
import threading

from helpers.scripted_sink import ScriptedSink

from se_forwarder import contract
from se_forwarder.delivery import DeadLetters, DeliveryWorker
from se_forwarder.outbox import OutboxRow, Store


def rec(n: int, size: int = 20, table: str = contract.RECORDS) -> OutboxRow:
    head = f'{{"n":{n},"p":"'
    return OutboxRow.raw(table, "vm0", head + "x" * (size - len(head) - 2) + '"}')


def numbers(rows) -> list[int]:
    return [json.loads(r.payload)["n"] for r in rows]


def test_rows_dropped_while_a_sink_sends_them_count_only_if_it_does_not_confirm(tmp_path):
    s = Store(tmp_path, max_bytes=100, durable=False)
    s.register_sinks(["a"])
    s.commit("k", 0, [rec(n) for n in range(1, 6)])
    sending = s.fetch("a", 2)  # 1 and 2 in the sink's hands
    dropped = s.commit("k", 0, [rec(6), rec(7), rec(8)])  # drops 1, 2 and 3
    assert (dropped.removed, dropped.lost, dropped.sending) == (3, 1, 2)
    assert s.counter("dropped") == 1  # 3: nobody had it
    # the service accepted 1 and 2 after all: they were not lost
    assert s.ack("a", sending[-1].seq, [r.seq for r in sending]) == 0
    assert s.counter("dropped") == 1
    s.close()
    assert Store(tmp_path, durable=False).counter("dropped") == 1  # nothing left pending


def test_a_row_dropped_in_hand_and_never_sent_counts_when_the_sink_moves_past_it(tmp_path):
    s = Store(tmp_path, max_bytes=60, durable=False)
    s.register_sinks(["a"])
    s.commit("k", 0, [rec(n) for n in range(1, 4)])
    s.fetch("a", 10)  # 1..3 in hand (a batch lingering)
    assert s.commit("k", 0, [rec(4)]).sending == 1  # 1 dropped while in hand
    assert s.counter("dropped") == 0
    again = s.fetch("a", 10)  # the batch is formed again without it
    assert numbers(again) == [2, 3, 4]
    assert s.ack("a", again[-1].seq, [r.seq for r in again]) == 1
    assert s.counter("dropped") == 1
    s.close()


def test_an_answer_cut_off_by_a_kill_counts_as_lost_at_the_next_start(tmp_path):
    s = Store(tmp_path, max_bytes=60, durable=False)
    s.register_sinks(["a"])
    s.commit("k", 0, [rec(n) for n in range(1, 4)])
    s.fetch("a", 10)
    s.commit("k", 0, [rec(4)])
    assert s.counter("dropped") == 0
    s.close()  # as a kill -9 leaves it: no acknowledgement after the drop
    s = Store(tmp_path, durable=False)
    assert s.counter("dropped") == 1
    s.close()
    s = Store(tmp_path, durable=False)
    assert s.counter("dropped") == 1  # counted once
    s.close()


def test_a_row_no_waiting_sink_takes_is_no_loss_and_a_row_two_sinks_miss_counts_once(tmp_path):
    s = Store(tmp_path, max_bytes=60, durable=False)
    s.register_sinks(
        ["records-only", "all"], {"records-only": {contract.RECORDS}, "all": set(contract.tables())}
    )
    s.commit("k", 0, [rec(1, table=contract.HEARTBEATS), rec(2), rec(3)])
    first = s.fetch("all", 1, after=0)[0]
    s.ack("all", first.seq, [first.seq])  # "all" has the heartbeat; "records-only" never takes it
    assert s.commit("k", 0, [rec(4)]).lost == 0  # the heartbeat went: nobody missed it
    assert s.commit("k", 0, [rec(5)]).lost == 1  # record 2: missed by both, counted once
    assert s.counter("dropped") == 1
    s.close()


def test_the_worker_confirms_what_the_service_accepted_while_the_bound_dropped_it(tmp_path):
    """End to end with the real delivery worker: while the sink is answering, new commits push
    its batch out of the spool; the service accepted it, so nothing is counted as dropped."""
    store = Store(tmp_path / "state", max_bytes=100, durable=False)
    store.register_sinks(["la"])
    store.commit("k", 0, [rec(n) for n in range(1, 4)])

    def slow_answer(batch):
        if numbers(batch)[0] == 1:  # while the first batch is on the wire, more arrives
            store.commit("k", 0, [rec(n) for n in range(4, 9)])

    sink = ScriptedSink([slow_answer], name="la")
    stop = threading.Event()
    worker = DeliveryWorker(sink, store, DeadLetters(tmp_path / "dead.jsonl"), stop=stop)
    worker.draining.set()
    worker.start()
    worker.join(10)
    assert not worker.is_alive()
    assert numbers(sink.delivered) == [1, 2, 3, 4, 5, 6, 7, 8]  # 1..3 confirmed, then the rest
    assert store.counter("dropped") == 0
    store.close()


def test_dropped_records_counts_records_and_heartbeat_rows_apart(tmp_path):
    """Issue 33: DroppedRecords was over by the heartbeat rows the bound dropped."""
    beat = contract.HEARTBEATS
    s = Store(tmp_path, max_bytes=100, durable=False)
    s.register_sinks(["a"])
    s.commit("k", 0, [rec(1), rec(2, table=beat), rec(3), rec(4)])
    s.commit("k", 0, [rec(5, table=beat), rec(6), rec(7)])  # drops 1 and the first beat
    assert s.counter("dropped") == 1 and s.counter("dropped_heartbeats") == 1
    sending = s.fetch("a", 10)  # 3, 4, the second beat, 6 and 7 in the sink's hands
    dropped = s.commit("k", 0, [rec(8), rec(9), rec(10)])  # drops 3, 4 and the second beat
    assert (dropped.removed, dropped.sending) == (3, 3)
    assert s.ack("a", sending[-1].seq, [sending[-1].seq]) == 3  # none of them confirmed
    assert s.counter("dropped") == 3 and s.counter("dropped_heartbeats") == 2
    s.fetch("a", 10)  # 8, 9, 10 in hand
    s.commit("k", 0, [rec(11, table=beat), rec(12), rec(13), rec(14)])  # drops 8 and 9
    s.close()  # a kill -9 before the answer: lost at the next start, each as what it was
    again = Store(tmp_path, durable=False)
    assert again.counter("dropped") == 5 and again.counter("dropped_heartbeats") == 2
    again.close()


def test_rows_read_ahead_to_be_sent_next_are_in_the_sink_s_hands(tmp_path):
    """The worker reads the next batch while one is being sent (``fetch(after=…, to_send=True)``):
    those rows count as sending, so a row the bound drops meanwhile and the service then accepts
    is no loss; rows only looked at (``after`` alone) are not in hand."""
    s = Store(tmp_path, max_bytes=100, durable=False)
    s.register_sinks(["a"])
    s.commit("k", 0, [rec(n) for n in range(1, 6)])
    sending = s.fetch("a", 2)  # 1 and 2 being sent
    ahead = s.fetch("a", 2, after=sending[-1].seq, to_send=True)  # 3 and 4 next
    assert numbers(ahead) == [3, 4]
    dropped = s.commit("k", 0, [rec(6), rec(7), rec(8), rec(9)])  # drops 1 to 4
    assert (dropped.removed, dropped.lost, dropped.sending) == (4, 0, 4)
    s.ack("a", sending[-1].seq, [r.seq for r in sending])
    s.ack("a", ahead[-1].seq, [r.seq for r in ahead])
    assert s.counter("dropped") == 0
    s.close()

    s = Store(tmp_path / "looked", max_bytes=100, durable=False)
    s.register_sinks(["a"])
    s.commit("k", 0, [rec(n) for n in range(1, 6)])
    s.fetch("a", 2, after=0)  # looked at, not sent
    assert s.commit("k", 0, [rec(6), rec(7)]).lost == 2
    s.close()
