"""A damaged state database or write-ahead log is never discarded in silence: it is moved aside
with a critical note and what can still be read is recovered into the new outbox. And one agent
per state directory."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from se_forwarder.errors import StateError
from se_forwarder.outbox import OutboxRow, Store
from se_forwarder.outbox.recovery import open_or_recover, wal_damage
from se_forwarder.recording.rebuild import rebuild

WRITER = textwrap.dedent("""
    import os, sys
    from se_forwarder.outbox import OutboxRow, Store
    store = Store(sys.argv[1])
    store.register_sinks(["file", "la"])
    for i in range(1, int(sys.argv[2]) + 1):  # one transaction per row: one commit frame each
        payload = '{"RecordId":"r%d","pad":"%s"}' % (i, "x" * 3000)
        store.commit("tracker", {"v": 1, "n": i}, [OutboxRow.raw("records", "vm", payload)],
                     {"counter:dropped": 7})
    store.ack("file", 1)
    os._exit(0)  # like kill -9: no close, no checkpoint; the WAL holds everything
""")


def crashed_store(tmp_path, rows: int = 6):
    state = tmp_path / "state"
    subprocess.run([sys.executable, "-c", WRITER, str(state), str(rows)], check=True, timeout=60)
    assert (state / "state.db-wal").stat().st_size > 32
    return state


def payload_ids(store: Store) -> list[str]:
    """Every row in the outbox, in order (whatever the cursors)."""
    return [json.loads(r.payload)["RecordId"] for r in store.fetch("any", 100, after=0)]


def test_an_intact_wal_after_a_crash_is_taken_as_it_is(tmp_path):
    state = crashed_store(tmp_path)
    assert wal_damage(state / "state.db-wal") is None
    store, note = open_or_recover(state, rebuild=rebuild)
    try:
        assert note is None and payload_ids(store) == [f"r{i}" for i in range(1, 7)]
    finally:
        store.close()


def test_a_damaged_wal_is_moved_aside_loudly_and_what_it_still_holds_is_recovered(tmp_path):
    state = crashed_store(tmp_path)
    wal = state / "state.db-wal"
    data = bytearray(wal.read_bytes())
    page = int.from_bytes(data[8:12], "big")
    frames = (len(data) - 32) // (24 + page)
    assert frames >= 6
    victim = 32 + (frames // 2) * (24 + page) + 24 + 100  # inside a page in the middle
    data[victim] ^= 0xFF
    wal.write_bytes(bytes(data))
    assert "committed transactions after it" in wal_damage(wal)
    store, note = open_or_recover(state, rebuild=rebuild)
    try:
        assert note is not None and "moved aside" in note and "recovered" in note
        ids = payload_ids(store)
        # What SQLite can still read of it (the transactions before the damage) is in the new
        # outbox, in order; nothing is invented.
        assert ids and ids == [f"r{i}" for i in range(1, len(ids) + 1)] and len(ids) < 6
        assert store.load("tracker")["n"] == len(ids)
        assert store.counter("dropped") == 7
    finally:
        store.close()
    assert list(state.glob("state.db.corrupt-*-wal"))


def test_a_torn_uncommitted_tail_is_not_damage(tmp_path):
    state = crashed_store(tmp_path, rows=3)
    wal = state / "state.db-wal"
    data = wal.read_bytes()
    wal.write_bytes(data + b"\x00" * 500)  # half a frame written when the power went
    assert wal_damage(wal) is None


def test_a_database_that_is_not_one_is_moved_aside_and_nothing_invented(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.db").write_bytes(b"this is not a database" * 100)
    store, note = open_or_recover(state, rebuild=rebuild)
    try:
        assert "moved aside" in note and "recovered 0" in note
        assert store.fetch("x", 10, after=0) == []
    finally:
        store.close()


def test_one_agent_per_state_directory(tmp_path):
    first = Store(tmp_path / "state")
    try:
        with pytest.raises(StateError, match=rf"pid {__import__('os').getpid()}"):
            Store(tmp_path / "state")
        with pytest.raises(StateError):
            open_or_recover(tmp_path / "state", rebuild=rebuild)
    finally:
        first.close()
    Store(tmp_path / "state").close()  # released with the first


@pytest.mark.process
def test_a_second_agent_exits_1_naming_the_first(simulator, agent_process, tmp_path):
    sim = simulator(vm_name="vm-lock")
    first = agent_process(sim.url, name="first", state_dir=tmp_path / "shared")
    try:
        assert first.wait_for(lambda a: a.messages("agent starting"), 15)
        second = agent_process(sim.url, name="second", state_dir=tmp_path / "shared")
        assert second.proc.wait(30) == 1
        second.wait_for(lambda a: False, 1)
        [line] = [ln for ln in second.lines if ln.get("level") == "critical"]
        assert f"pid {first.proc.pid}" in line["msg"]
        assert first.proc.poll() is None  # the first goes on
    finally:
        assert first.stop() == 0


def test_rows_keep_their_routing_through_recovery(tmp_path):
    store = Store(tmp_path / "s")
    store.register_sinks(["eh"])
    store.commit(
        "tracker",
        None,
        [OutboxRow.raw("records", "vm", '{"a":1}', phase="Started", event_type="Reboot")],
    )
    store.close()
    from se_forwarder.outbox.recovery import salvage

    [row] = salvage(tmp_path / "s" / "state.db").rows
    assert (row.phase, row.event_type, row.partition_key) == ("Started", "Reboot", "vm")


# -- a page damaged in the middle of state.db (issue 33) -----------------------------------------


def closed_store(tmp_path, rows: int = 40):
    """A cleanly closed store of ``rows`` one-kilobyte records (three to a page), none
    delivered, and the pages of each table as SQLite's dbstat lists them."""
    state = tmp_path / "state"
    store = Store(state)
    store.register_sinks(["file"])
    for i in range(1, rows + 1):
        payload = json.dumps({"RecordId": f"r{i}", "pad": "x" * 1000})
        store.commit("tracker", {"n": i}, [OutboxRow.raw("records", "vm", payload)])
    store.close()
    db = sqlite3.connect(state / "state.db")
    pages = {}
    for name, page, kind in db.execute("SELECT name, pageno, pagetype FROM dbstat"):
        pages.setdefault((name, kind), []).append(page)
    db.close()
    return state, pages


def zero_page(state, page: int) -> None:
    with (state / "state.db").open("r+b") as f:
        f.seek((page - 1) * 4096)
        f.write(b"\xff" * 4096)


def test_damage_opening_does_not_read_is_found_at_start_not_when_running(tmp_path):
    """The tracker state's page: the database opened, then the agent's first read of it failed
    (exit 1, "cannot open the state directory", and systemd restarted it into the same)."""
    state, pages = closed_store(tmp_path)
    [meta] = pages[("meta", "leaf")]
    zero_page(state, meta)
    store, note = open_or_recover(state, rebuild=rebuild)
    try:
        assert note is not None and "moved aside" in note and "recovered 40" in note
        assert "tracker state: database disk image is malformed" in note
        assert payload_ids(store) == [f"r{i}" for i in range(1, 41)]
        assert store.load("tracker") is None and store.scan("hook:") == {}  # readable again
    finally:
        store.close()
    assert list(state.glob("state.db.corrupt-*"))  # kept for an operator


def test_a_damaged_leaf_costs_only_the_rows_on_it_counted(tmp_path):
    state, pages = closed_store(tmp_path)
    leaves = pages[("outbox", "leaf")]
    victim = leaves[len(leaves) // 2]
    db = sqlite3.connect(state / "state.db")
    on_it = db.execute("SELECT ncell FROM dbstat WHERE pageno = ?", (victim,)).fetchone()[0]
    db.close()
    zero_page(state, victim)
    store, note = open_or_recover(state, rebuild=rebuild)
    try:
        ids = payload_ids(store)
        assert len(ids) == 40 - on_it and on_it == 3
        assert ids == sorted(ids, key=lambda r: int(r[1:]))  # in order, nothing invented
        assert f"{on_it} record(s) lost" in note
        assert store.counter("lost") == on_it  # status and the heartbeats show it
        assert store.load("tracker") == {"n": 40}
    finally:
        store.close()


def test_a_damaged_interior_page_loses_no_row_below_it(tmp_path):
    """The b-tree cannot reach the leaves under a damaged interior page: they are read off the
    file, and a stale page on the free list is not taken for a live one."""
    state, pages = closed_store(tmp_path)
    store = Store(state)
    store.register_sinks(["file"])
    store.ack("file", 5)  # r1..r5 delivered: their pages may be free, their rows stale
    store.close()
    [interior] = pages[("outbox", "internal")]
    zero_page(state, interior)
    store, note = open_or_recover(state, rebuild=rebuild)
    try:
        assert "moved aside" in note and "lost" not in note
        assert payload_ids(store) == [f"r{i}" for i in range(6, 41)]
    finally:
        store.close()
