"""Hostile messages through the real ``EventHubConsumerClient`` and the Event Hubs stand-in,
checkpoints in Azurite (issue 33): a body of nested arrays, a body that is not UTF-8, a lone
surrogate, 20,000 names, an undocumented status and a 1 MB Description between good events on
one partition. None stalls the partition: what cannot be read is counted, logged once, kept
aside in ``unreadable-messages.jsonl`` and checkpointed past; the good events around it arrive
within seconds; the rest are recorded cut to their limits and counted."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from helpers.collector import HUB, CollectorWorld, scheduled, vm_parent
from test_collect_e2e import status, stop, wait_status

MAX_NAMES = 1000

pytestmark = [pytest.mark.e2e, pytest.mark.tls, pytest.mark.process]


@pytest.fixture
def world(tmp_path) -> Iterator[CollectorWorld]:
    with CollectorWorld(tmp_path) as w:
        yield w
        assert w.hub.errors == []


def _json_lines(path) -> list[dict]:
    text = path.read_text()
    lines = text.splitlines()
    assert all(x.startswith("{") for x in lines), [x for x in lines if not x.startswith("{")][:3]
    return [json.loads(x) for x in lines]


def _rows_of(world: CollectorWorld, event_id: str) -> list[dict]:
    return [r for r in world.platform_rows() if r["EventId"] == event_id]


def test_no_message_stalls_the_partition_and_the_good_ones_around_it_arrive(world, tmp_path):
    state = tmp_path / "c"
    config = world.collector_config(state)
    proc = world.start_collector(config)
    try:
        wait_status(
            state, lambda s: bool(s) and sum(p["owned"] for p in s["partitions"].values()) == 2, 60
        )
        scale_set = vm_parent("x").replace("virtualMachines/x", "virtualMachineScaleSets/big")
        surrogate = scheduled("SURR", "Scheduled", "2026-03-01T00:00:02Z")
        surrogate["data"]["resourceInfo"]["properties"]["Description"] = "a\ud800b"
        long = scheduled("LONG", "Scheduled", "2026-03-01T00:00:05Z")
        long["data"]["resourceInfo"]["properties"]["Description"] = "x" * 1_000_000
        bodies: list[bytes | str] = [
            json.dumps([scheduled("GOOD1", "Scheduled", "2026-03-01T00:00:00Z")]),
            b"[" * 100_000 + b"]" * 100_000,  # RecursionError out of parse_body before
            b'[{"id": "\xff\xfe"}]',  # TypeError from body_as_str before
            json.dumps([surrogate]),  # UnicodeEncodeError on the way out before
            json.dumps(
                [
                    scheduled(
                        "NAMES",
                        "Scheduled",
                        "2026-03-01T00:00:03Z",
                        parent=scale_set,
                        resources=[f"big_{i}" for i in range(20_000)],
                    )
                ]
            ),
            json.dumps([scheduled("BOOM", "Exploded", "2026-03-01T00:00:04Z")]),
            json.dumps([long]),
            json.dumps([scheduled("GOOD2", "Completed", "2026-03-01T00:00:06Z")]),
        ]
        sent = time.monotonic()
        for body in bodies:
            world.hub.inject(HUB, body, partition=0)
        deadline = sent + 60
        while not _rows_of(world, "GOOD2") and time.monotonic() < deadline:
            time.sleep(0.05)
        arrived = time.monotonic() - sent
        assert _rows_of(world, "GOOD2"), "the good event after the hostile ones never arrived"
        assert arrived < 10, f"{arrived:.1f} s from the hub to the table"
        rc, out = wait_status(state, lambda s: s["committed"] >= 5 + MAX_NAMES)
        st = out["status"]
        assert (st["set_aside"], st["names_cut"], st["unknown_statuses"]) == (2, 19_000, 1)
        assert st["truncated_values"] == 2  # the Description and the 20,000-name Resources
        assert st["partitions"]["0"]["last_sequence_number"] == len(bodies) - 1
        assert st["partitions"]["0"]["last_checkpoint_at"] is not None
        assert (rc, out["state"]) == (0, "healthy"), out
        assert (
            "2 unreadable message(s) or event(s) kept in unreadable-messages.jsonl"
            in (out["warnings"])
        )
    finally:
        assert stop(proc) == 0
    (surr,) = _rows_of(world, "SURR")
    assert surr["Description"] == "a\ufffdb"
    names = _rows_of(world, "NAMES")
    assert len(names) == MAX_NAMES and sum(r["Resources"] is not None for r in names) == 1
    (boom,) = _rows_of(world, "BOOM")
    assert boom["EventStatus"] == "Exploded"
    (cut,) = _rows_of(world, "LONG")
    assert cut["Description"].endswith("[truncated: 1000000 bytes]")
    assert _rows_of(world, "GOOD1")
    kept = _json_lines(state / "unreadable-messages.jsonl")
    assert [(k["partition"], k["sequence_number"]) for k in kept] == [("0", 1), ("0", 2)]
    assert "deeper than" in kept[0]["reason"] and "not UTF-8" in kept[1]["reason"]
    assert "\\xff\\xfe" in kept[1]["content"]
    log = _json_lines(config.with_suffix(".log"))  # every line JSON, the SDK's too
    skipped = [x for x in log if x["msg"].startswith("unreadable platform message")]
    assert len(skipped) == 2  # once each: never read again
    assert not [x for x in log if "receive failed" in x["msg"]]
    assert len([x for x in log if x["msg"] == "platform event not recorded as served"]) == 4
    # checkpointed past: a restart reads only what comes after
    proc = world.start_collector(config)
    try:
        world.hub.inject(
            HUB, json.dumps([scheduled("GOOD3", "Started", "2026-03-01T00:01:00Z")]), partition=0
        )
        deadline = time.monotonic() + 60
        while not _rows_of(world, "GOOD3") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _rows_of(world, "GOOD3")
    finally:
        assert stop(proc) == 0
    assert len(_json_lines(state / "unreadable-messages.jsonl")) == 2
    rc, out = status(state)
    assert out["status"]["set_aside"] == 0 and out["status"]["duplicate_notifications"] == 0
