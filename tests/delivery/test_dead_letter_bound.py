"""``dead-letter.jsonl`` bounded (issue 18: a sink that dead-letters forever filled the disk):
past ``max_bytes`` it moves to ``dead-letter.jsonl.1``; the lines of a previous file replaced are
counted exactly where status and the heartbeat show them, and logged once per kind, never per
record. Against the real worker, the real SQLite outbox and a scripted sink that refuses all."""

from __future__ import annotations

import json
import logging

import pytest
from helpers.agentrun import AgentRun
from helpers.scripted_sink import ScriptedSink, fails, rows

from se_forwarder import contract
from se_forwarder.collector.health import CollectorSnapshot
from se_forwarder.collector.status import warnings as collector_warnings
from se_forwarder.delivery import DeliveryPool
from se_forwarder.delivery.dead_letters import acknowledge, backlog, previous_path
from se_forwarder.delivery.pool import DEAD_LETTERS_DROPPED
from se_forwarder.errors import Verdict
from se_forwarder.health.fields import by_name
from se_forwarder.health.snapshot import Snapshot, heartbeat_values, warnings
from se_forwarder.outbox import Store
from se_forwarder.sinks.batching import BatchLimits
from se_forwarder_testbed.agentproc import write_config

BOUND = 8 * 1024
ROWS = 400  # about 130 bytes a line: some 50 kB of dead letters, six times the bound


def lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def dead_letter_all(tmp_path, n: int, *, start: int = 1, state=None) -> tuple[DeliveryPool, Store]:
    """A pool whose one sink dead-letters every record; ``n`` records sent through it (the
    outbox in ``state``, ``tmp_path / "state"`` unless given)."""
    store = Store(state or tmp_path / "state", durable=False)
    sink = ScriptedSink(
        default=fails(Verdict.DEAD_LETTER, "gone"),
        limits=BatchLimits(max_records=7, linger_seconds=0.0),
    )
    store.register_sinks([sink.name])
    store.commit("state", {}, rows(n, start=start))
    pool = DeliveryPool([sink], store, tmp_path / "dead-letter.jsonl", dead_letter_max_bytes=BOUND)
    pool.start()
    pool.drain(30)
    assert not pool.alive() and store.depth(sink.name) == 0
    return pool, store


def test_the_dead_letter_file_stays_within_its_bound_and_what_it_drops_is_counted_exactly(
    tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="se_forwarder")
    pool, store = dead_letter_all(tmp_path, ROWS)
    path = tmp_path / "dead-letter.jsonl"
    current, previous = lines(path), lines(previous_path(path))
    assert path.stat().st_size <= BOUND and previous_path(path).stat().st_size <= BOUND
    kept = [d["seq"] for d in previous + current]
    dropped = pool.dead_letters.dropped
    assert store.counter(DEAD_LETTERS_DROPPED) == dropped  # recorded as they are dropped
    # the newest lines are kept, in order; every line removed is counted, no more
    assert kept == list(range(dropped + 1, ROWS + 1)), (dropped, kept[:3])
    assert dropped == ROWS - len(kept) > 0
    assert pool.totals().dead_lettered == ROWS
    # one log line per kind of occurrence, not one per record or per move
    messages = [r.getMessage() for r in caplog.records]
    assert sum(m.startswith("dead-letter file at its bound") for m in messages) == 1
    assert sum(m.startswith("dead-letter lines dropped") for m in messages) == 1
    # status.json, the heartbeat and status's warnings carry the count
    snap = Snapshot(**by_name(Snapshot, pool.totals()), dead_letters_dropped=dropped)
    assert snap.to_json()["dead_letters_dropped"] == dropped
    assert heartbeat_values(snap)["DeadLettersDropped"] == dropped
    assert f"{dropped} record(s) dropped from the dead-letter file (at its bound)" in warnings(snap)
    # the collector's status (the same pool) too
    collected = CollectorSnapshot(
        **by_name(CollectorSnapshot, pool.totals()), dead_letters_dropped=dropped
    )
    assert collected.to_json()["dead_letters_dropped"] == dropped
    assert (
        f"{dropped} dead-lettered row(s) dropped from the dead-letter file (at its bound)"
        in collector_warnings(collected)
    )
    store.close()


def test_status_counts_both_files_and_an_acknowledgement_covers_both(tmp_path):
    _, store = dead_letter_all(tmp_path, 100)
    path = tmp_path / "dead-letter.jsonl"
    assert previous_path(path).exists()
    on_disk = len(lines(path)) + len(lines(previous_path(path)))
    seen = backlog(path)
    assert seen.records == on_disk and seen.pending == on_disk
    assert acknowledge(path).pending == 0 and backlog(path).pending == 0
    store.close()
    # more dead letters after it: the new lines count again, the lines read stay read, also
    # those of the file that moved to .1 (its inode is kept)
    _, store = dead_letter_all(tmp_path, 30, start=101)
    now = backlog(path)
    assert now.pending == 30 and now.records == len(lines(path)) + len(lines(previous_path(path)))
    store.close()


def test_an_acknowledgement_written_before_the_bound_is_still_read(tmp_path):
    path = tmp_path / "dead-letter.jsonl"
    path.write_text('{"seq":1}\n{"seq":2}\n')
    path.with_suffix(".ack").write_text(json.dumps({"inode": path.stat().st_ino, "offset": 10}))
    assert backlog(path).pending == 1


def test_a_line_larger_than_the_bound_is_written_alone(tmp_path):
    from se_forwarder.delivery.dead_letters import DeadLetters
    from se_forwarder.outbox import OutboxRow

    dead = DeadLetters(
        tmp_path / "dead-letter.jsonl", max_bytes=1024, logger=logging.getLogger("t")
    )
    big = OutboxRow.raw("records", "vm-1", json.dumps({"pad": "x" * 4000}), seq=1)
    small = OutboxRow.raw("records", "vm-1", "{}", seq=2)
    dead.write("s", "gone", [small])
    dead.write("s", "gone", [big])
    dead.write("s", "gone", [small])
    assert [d["seq"] for d in lines(dead.path)] == [2]
    assert [d["seq"] for d in lines(previous_path(dead.path))] == [1]
    assert dead.dropped == 1  # the first small line, in the .1 the big one replaced


@pytest.mark.e2e
def test_dead_letters_dropped_before_a_kill_reach_the_next_runs_heartbeat_once(
    simulator, clock, tmp_path
):
    """A run that dropped dead-letter lines at the bound and died before its next heartbeat (a
    kill -9: nothing after the drop but what it committed) leaves the count in the outbox; the
    next run's heartbeat and status report it, and the run after that does not again."""
    state = tmp_path / "state"
    pool, store = dead_letter_all(state, ROWS, state=state)  # dead-letter.jsonl in the state dir
    dropped = pool.dead_letters.dropped
    assert dropped > 0
    store.close()  # no heartbeat after the drops; what a kill -9 leaves is what was committed

    sim = simulator(vm_name="vm-dead", clock=clock)
    config = write_config(tmp_path / "agent.toml", sim.url, state)

    def start_heartbeat() -> tuple[dict, dict]:
        sink = ScriptedSink(name="scripted")
        agent = AgentRun(config, clock, sinks=[sink])
        try:
            assert agent.wait_for(
                lambda a: any(r.table == contract.HEARTBEATS for r in sink.delivered), 10
            )
            status = agent.status_json()
        finally:
            assert agent.stop() == 0
        beat = json.loads(next(r.payload for r in sink.delivered if r.table == contract.HEARTBEATS))
        assert beat["Reason"] == "start"
        return beat, status

    beat, status = start_heartbeat()
    assert beat["DeadLettersDropped"] == dropped
    assert status["dead_letters_dropped"] == dropped
    beat, status = start_heartbeat()  # reported once: not again by the run after
    assert beat["DeadLettersDropped"] == 0 and status["dead_letters_dropped"] == 0
