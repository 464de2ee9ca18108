"""status.json: made anew (renamed over the old) at a run's first write and whenever its size
changes; in between written over its own blocks, which costs an idle agent a tenth of a rename
over a file. Whatever happens to the file in between, what is there is the last snapshot."""

from __future__ import annotations

import json
import os
from dataclasses import replace

from se_forwarder.commands.status import load
from se_forwarder.health.snapshot import OpenEvent, Snapshot
from se_forwarder.health.status_file import STATUS_BLOCK, StatusFile


def _event(n: int) -> OpenEvent:
    return OpenEvent(f"event-{n:04d}-" + "x" * 40, "Reboot", "Scheduled", "Platform",
                     "2026-11-25T18:00:00.000Z", 0, True)


def test_same_size_is_written_in_place_and_a_new_size_makes_a_new_file(tmp_path):
    old = tmp_path / "status.json"
    old.write_text('{"polls": 1, "from": "the last run"}')
    before = os.stat(old).st_ino
    sf = StatusFile(tmp_path)
    sf.write(Snapshot(polls=2))
    first = os.stat(sf.path).st_ino
    assert first != before  # a run's first write replaces what an older run left
    sf.write(Snapshot(polls=3))
    assert os.stat(sf.path).st_ino == first  # same size: in place
    assert load(sf.path)["polls"] == 3
    big = Snapshot(polls=4, open_events=tuple(_event(n) for n in range(60)))
    sf.write(big)
    assert os.stat(sf.path).st_size > STATUS_BLOCK and os.stat(sf.path).st_ino != first
    data = load(sf.path)
    assert data["polls"] == 4 and len(data["open_events"]) == 60
    sf.write(replace(big, polls=5))
    assert load(sf.path)["polls"] == 5


def test_a_file_replaced_behind_the_agents_back_is_replaced_again_not_written_into(tmp_path):
    sf = StatusFile(tmp_path)
    sf.write(Snapshot(polls=1))
    sf.path.write_text(json.dumps({"polls": 0}) + " " * (3 * STATUS_BLOCK))  # larger, not ours
    sf.write(Snapshot(polls=2))
    assert load(sf.path)["polls"] == 2 and os.stat(sf.path).st_size == STATUS_BLOCK
    sf.path.unlink()
    sf.write(Snapshot(polls=3))
    assert load(sf.path)["polls"] == 3
