"""The SQLite store: state and records committed together or not at all, one cursor per sink,
forgetting sinks, and the spool bound that drops the OLDEST records and counts them
(architecture.md: store.py; record-contract.md §1 on restarts)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from se_forwarder import tracker
from se_forwarder.model import VmIdentity
from se_forwarder.outbox import OutboxRow, Store
from se_forwarder.recording.recorder import STATE_KEY, Recorder

VM = VmIdentity(VmName="vm0")


def rec(n: int, size: int = 20) -> OutboxRow:
    """A record whose payload is exactly ``size`` bytes and says which one it is."""
    head = f'{{"n":{n},"p":"'
    pad = size - len(head) - 2
    assert pad >= 0
    return OutboxRow.raw("records", "vm0", head + "x" * pad + '"}')


def numbers(items) -> list[int]:
    return [json.loads(i.payload)["n"] for i in items]


def outbox_rows(store: Store) -> list[tuple]:
    with store._lock:
        return store._db.execute(
            "SELECT seq, tbl, pkey, payload, size FROM outbox ORDER BY seq"
        ).fetchall()


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "state", durable=False)
    yield s
    s.close()


# -- state + records -------------------------------------------------------------------------


def test_commit_persists_state_and_records_across_reopen(tmp_path):
    s = Store(tmp_path, durable=False)
    s.register_sinks(["file"])
    assert s.load("k") is None
    assert s.commit("k", {"a": [1, 2]}, [rec(1, 20), rec(2, 30)]).removed == 0
    s.close()
    s = Store(tmp_path, durable=False)
    assert s.load("k") == {"a": [1, 2]}
    items = s.fetch("file", 10)
    assert numbers(items) == [1, 2]
    assert [i.size for i in items] == [20, 30]
    assert items[0].seq < items[1].seq
    assert s.spooled_bytes == 50  # recounted from disk
    s.close()


def test_outbox_items_keep_table_and_partition_key(store):
    store.register_sinks(["a"])
    store.commit("k", 1, [OutboxRow.raw("heartbeats", "vm-id-1", '{"x":1}')])
    (item,) = store.fetch("a", 10)
    assert (item.table, item.partition_key, item.payload) == ("heartbeats", "vm-id-1", '{"x":1}')


def test_failing_records_iterable_rolls_back_everything(store):
    store.register_sinks(["a"])
    store.commit("k", {"v": 1}, [rec(1)])

    def records():
        yield rec(2)
        raise OSError("disk gone")

    with pytest.raises(OSError):
        store.commit("k", {"v": 2}, records())
    assert store.load("k") == {"v": 1}
    assert numbers(store.fetch("a", 10)) == [1]
    assert store.spooled_bytes == 20
    # and the store still works
    store.commit("k", {"v": 3}, [rec(3)])
    assert numbers(store.fetch("a", 10)) == [1, 3]


def test_commit_while_database_is_locked_leaves_state_and_outbox(store):
    store.register_sinks(["a"])
    store.commit("k", {"v": 1}, [rec(1)])
    with store._lock:
        store._db.execute("PRAGMA busy_timeout=50")
    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    try:
        with pytest.raises(sqlite3.OperationalError):
            store.commit("k", {"v": 2}, [rec(2)])
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.load("k") == {"v": 1}
    assert numbers(store.fetch("a", 10)) == [1]
    assert store.spooled_bytes == 20
    store.commit("k", {"v": 3}, [rec(3)])
    assert store.load("k") == {"v": 3}
    assert numbers(store.fetch("a", 10)) == [1, 3]


def test_commit_into_a_full_database_leaves_state_and_outbox(store):
    store.register_sinks(["a"])
    store.commit("k", {"v": 1}, [rec(1)])
    with store._lock:
        pages = store._db.execute("PRAGMA page_count").fetchone()[0]
        store._db.execute(f"PRAGMA max_page_count={pages}")  # the disk is full
    with pytest.raises(sqlite3.Error, match="full"):
        store.commit("k", {"v": 2}, [rec(2), rec(3, 100_000)])  # fails at the big record
    assert store.load("k") == {"v": 1}
    assert numbers(store.fetch("a", 10)) == [1]
    assert store.spooled_bytes == 20


# -- cursors ------------------------------------------------------------------------------------


def test_each_sink_has_its_own_cursor(store):
    assert store.register_sinks(["fast", "slow"]) == {}
    store.commit("k", 0, [rec(n) for n in range(1, 6)])
    fast = store.fetch("fast", 2)
    assert numbers(fast) == [1, 2]
    store.ack("fast", fast[-1].seq)
    assert numbers(store.fetch("fast", 10)) == [3, 4, 5]
    assert numbers(store.fetch("slow", 10)) == [1, 2, 3, 4, 5]  # not held back, not skipped
    assert store.depths() == {"fast": 3, "slow": 5}
    assert store.depth("slow") == 5
    # fetch after an explicit position, without moving the cursor
    assert numbers(store.fetch("slow", 2, after=fast[0].seq)) == [2, 3]
    assert store.depth("slow") == 5


def test_depths_follow_every_change_of_the_spool(store):
    """depths() is read once per change (an idle agent's status.json asks every few seconds):
    each kind of change shows at once."""
    store.register_sinks(["a"])
    assert store.depths() == {"a": 0}
    assert store.depths() == {"a": 0}  # asked again, nothing changed
    store.commit("k", 0, [rec(n) for n in range(1, 4)])
    assert store.depths() == {"a": 3}
    store.ack("a", store.fetch("a", 1)[-1].seq)
    assert store.depths() == {"a": 2}
    store.register_sinks(["a", "b"])  # a new sink starts at what is still spooled
    assert store.depths() == {"a": 2, "b": 2}
    assert store.claim("once", 1, [rec(4)])
    assert store.depths() == {"a": 3, "b": 3}
    store.register_sinks(["b"])  # a sink forgotten
    assert store.depths() == {"b": 3}


def test_ack_never_moves_a_cursor_backwards(store):
    store.register_sinks(["a"])
    store.commit("k", 0, [rec(n) for n in range(1, 4)])
    items = store.fetch("a", 10)
    store.ack("a", items[2].seq)
    store.ack("a", items[0].seq)  # a late, older acknowledgement
    assert store.fetch("a", 10) == []
    assert store.depth("a") == 0


def test_records_acknowledged_by_every_sink_are_deleted(store):
    store.register_sinks(["a", "b"])
    store.commit("k", 0, [rec(n) for n in range(1, 4)])
    seqs = [i.seq for i in store.fetch("a", 10)]
    store.ack("a", seqs[2])
    assert len(outbox_rows(store)) == 3  # b still needs them
    store.ack("b", seqs[0])
    assert [r[0] for r in outbox_rows(store)] == seqs[1:]
    assert store.spooled_bytes == 40


def test_cursors_survive_a_restart(tmp_path):
    s = Store(tmp_path, durable=False)
    s.register_sinks(["a"])
    s.commit("k", 0, [rec(1), rec(2)])
    s.ack("a", s.fetch("a", 1)[0].seq)
    s.close()
    s = Store(tmp_path, durable=False)
    assert s.register_sinks(["a"]) == {}
    assert numbers(s.fetch("a", 10)) == [2]
    s.close()


def test_unregistered_sink_has_no_cursor(store):
    with pytest.raises(KeyError):
        store.fetch("nobody", 10)
    with pytest.raises(KeyError):
        store.depth("nobody")


def test_new_sink_starts_at_what_is_still_spooled(store):
    store.register_sinks(["a", "b"])
    store.commit("k", 0, [rec(n) for n in range(1, 5)])
    items = store.fetch("a", 10)
    store.ack("a", items[3].seq)
    store.ack("b", items[1].seq)  # 3 and 4 still spooled for b
    store.register_sinks(["a", "b", "c"])
    assert numbers(store.fetch("c", 10)) == [3, 4]


def test_forgetting_a_sink_stops_it_holding_records_back(store):
    store.register_sinks(["a", "gone"])
    store.commit("k", 0, [rec(n) for n in range(1, 4)])
    store.ack("a", store.fetch("a", 10)[-1].seq)
    assert len(outbox_rows(store)) == 3
    assert store.register_sinks(["a"]) == {"gone": 3}  # its backlog, said when released
    assert outbox_rows(store) == []
    assert store.spooled_bytes == 0
    assert store.depths() == {"a": 0}
    with pytest.raises(KeyError):
        store.fetch("gone", 1)


# -- the spool bound -------------------------------------------------------------------------


def test_spool_bound_drops_the_oldest_and_counts_them(tmp_path):
    s = Store(tmp_path, max_bytes=100, durable=False)
    s.register_sinks(["a"])
    assert s.commit("k", 1, [rec(n, 20) for n in range(1, 6)]).removed == 0  # exactly 100: fits
    assert s.counter("dropped") == 0
    assert s.commit("k", 2, [rec(6, 20), rec(7, 20)]).lost == 2  # 140 > 100: drop 1 and 2
    assert numbers(s.fetch("a", 100, after=0)) == [3, 4, 5, 6, 7]  # looked at, not sent
    assert s.spooled_bytes == 100
    assert s.counter("dropped") == 2
    assert s.commit("k", 3, [rec(8, 30)]).lost == 2  # 130: dropping 3 leaves 110, so 4 goes too
    assert numbers(s.fetch("a", 100, after=0)) == [5, 6, 7, 8]
    assert s.counter("dropped") == 4  # a running total
    assert s.load("k") == 3  # the state was committed with the records
    s.close()
    s = Store(tmp_path, max_bytes=100, durable=False)
    assert s.counter("dropped") == 4
    assert s.spooled_bytes == 90
    s.close()


def test_spool_bound_drops_even_records_a_sink_is_about_to_read(tmp_path):
    s = Store(tmp_path, max_bytes=50, durable=False)
    s.register_sinks(["a", "b"])
    s.commit("k", 0, [rec(n, 20) for n in range(1, 3)])
    s.ack("a", s.fetch("a", 1)[0].seq)
    assert s.commit("k", 0, [rec(3, 20)]).lost == 1
    # 1 was acknowledged by a only, so it was still spooled: it is the oldest and goes first,
    # although b never had it (the drop is counted, not silent)
    assert numbers(s.fetch("b", 10)) == [2, 3]
    assert s.counter("dropped") == 1
    assert numbers(s.fetch("a", 10)) == [2, 3]
    s.close()


def test_a_batch_larger_than_the_bound_keeps_only_its_newest(tmp_path):
    s = Store(tmp_path, max_bytes=45, durable=False)
    s.register_sinks(["a"])
    assert s.commit("k", 0, [rec(n, 20) for n in range(1, 5)]).lost == 2
    assert numbers(s.fetch("a", 10)) == [3, 4]
    assert s.counter("dropped") == 2
    s.close()


# -- the Recorder over a failing store: nothing lost ----------------------------------------

DOC1 = {"DocumentIncarnation": 1, "Events": []}
DOC2 = {
    "DocumentIncarnation": 2,
    "Events": [
        {
            "EventId": "e1",
            "EventStatus": "Scheduled",
            "EventType": "Freeze",
            "ResourceType": "VirtualMachine",
            "Resources": ["vm0"],
            "NotBefore": "Fri, 01 Mar 2024 10:15:00 GMT",
        }
    ],
}
T0 = 1_709_287_200_000  # 2024-03-01T10:00:00Z


def test_recorder_rediffs_after_a_failed_commit_so_no_record_is_lost(tmp_path):
    store = Store(tmp_path, durable=False)
    store.register_sinks(["a"])
    r = Recorder(store, VM)
    assert r.answer(T0, 200, DOC1, parsed=True) == []
    saved = store.load(STATE_KEY)
    with store._lock:
        store._db.execute("PRAGMA busy_timeout=50")
    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        assert r.answer(T0 + 1000, 200, DOC2, parsed=True) == []  # could not persist
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.load(STATE_KEY) == saved
    assert store.fetch("a", 10) == []
    # the next poll serves the same body: it is diffed again, not skipped as "unchanged"
    out = r.answer(T0 + 2000, 200, DOC2, parsed=True)
    assert [(x.Phase, x.EventId) for x in out] == [("FirstSeen", "e1")]
    assert out[0].TimeGenerated == "2024-03-01T10:00:02.000Z"
    assert out[0].UncertaintySeconds == 2.0  # since the last poll whose result was committed
    (item,) = store.fetch("a", 10)
    assert json.loads(item.payload)["RecordId"] == out[0].RecordId
    assert tracker.state_from_json(store.load(STATE_KEY)).events.keys() == {"e1"}
    # nothing twice
    assert r.answer(T0 + 3000, 200, DOC2, parsed=True) == []
    store.close()


def test_failed_commit_then_crash_rediffs_after_restart(tmp_path):
    store = Store(tmp_path, durable=False)
    r = Recorder(store, VM)
    r.answer(T0, 200, DOC1, parsed=True)
    with store._lock:
        pages = store._db.execute("PRAGMA page_count").fetchone()[0]
        store._db.execute(f"PRAGMA max_page_count={pages}")
    big = json.loads(json.dumps(DOC2))
    big["Events"][0]["Description"] = "z" * 200_000
    assert r.answer(T0 + 1000, 200, big, parsed=True) == []
    store.close()  # crash: nothing was checkpointed
    store = Store(tmp_path, durable=False)
    r = Recorder(store, VM)
    out = r.answer(T0 + 5000, 200, big, parsed=True)
    assert [x.Phase for x in out] == ["FirstSeen"]
    assert out[0].UncertaintySeconds == 5.0
    store.close()


def test_recorder_counts_bad_observations_and_keeps_state(tmp_path):
    store = Store(tmp_path, durable=False)
    r = Recorder(store, VM)
    r.answer(T0, 200, DOC2, parsed=True)
    before = store.load(STATE_KEY)
    r.bad(T0 + 1000, "timeout")
    r.answer(T0 + 2000, 500, "Internal Server Error")
    r.answer(T0 + 3000, 200, b"")
    r.answer(T0 + 4000, 200, {"DocumentIncarnation": 3}, parsed=True)
    assert (r.stats.polls, r.stats.poll_errors) == (5, 4)
    assert r.stats.last_ok_ms == T0
    assert "Events" in r.stats.last_error
    assert store.load(STATE_KEY) == before
    parsed = tracker.state_from_json(before)
    assert parsed.last_ok_ms == T0 and set(parsed.events) == {"e1"}
    store.close()


def test_a_repeating_bad_observation_is_logged_when_it_starts_then_once_a_minute(tmp_path, caplog):
    import logging

    from se_forwarder.model import VmIdentity
    from se_forwarder.recording.recorder import Recorder

    rec = Recorder(Store(tmp_path), VmIdentity(VmName="vm0"))
    t = 1_700_000_000_000
    with caplog.at_level(logging.INFO, logger="se_forwarder"):
        for i in range(90):  # 90 polls, one a second, all garbage
            rec.answer(t + i * 1000, 200, b"<html>oops</html>")
        rec.answer(t + 90_000, 200, b'{"DocumentIncarnation": 1, "Events": []}')
    bad = [r for r in caplog.records if r.getMessage() == "bad observation"]
    assert len(bad) == 2 and bad[1].fields["repeated"] == 61  # at 0 s, then 60 s later
    assert rec.stats.poll_errors == 90
    [back] = [r for r in caplog.records if r.getMessage() == "polls answered again"]
    assert back.fields["after_failures"] == 90


def test_a_failed_commit_counts_as_a_failed_poll(tmp_path):
    import sqlite3

    from se_forwarder.model import VmIdentity
    from se_forwarder.recording.recorder import Recorder

    store = Store(tmp_path)
    rec = Recorder(store, VmIdentity(VmName="vm0"))
    other = sqlite3.connect(store.path, isolation_level=None, timeout=0.1)
    store._db.execute("PRAGMA busy_timeout=50")
    other.execute("BEGIN EXCLUSIVE")
    try:
        body = (
            b'{"DocumentIncarnation": 2, "Events": [{"EventId": "e1", "EventType": "Freeze", '
            b'"EventStatus": "Scheduled", "Resources": ["vm0"], "NotBefore": ""}]}'
        )
        assert rec.answer(1_700_000_000_000, 200, body) == []
        assert rec.stats.poll_errors == 1 and "cannot persist" in rec.stats.last_error
    finally:
        other.execute("ROLLBACK")
        other.close()
    [first] = rec.answer(1_700_000_001_000, 200, body)  # diffed again: nothing lost
    assert first.Phase == "FirstSeen"
