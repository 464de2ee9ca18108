"""helpers/scheduling.py names modules and tests by path: a rename must not leave it naming
nothing (the suite would still pass, only slower)."""

from __future__ import annotations

from helpers import REPO, scheduling


def test_every_module_and_test_the_parallel_run_schedules_exists():
    for path in {*scheduling.FIRST, *scheduling.SPREAD}:
        assert (REPO / path).is_file(), path
    for nodeid in scheduling.ALONE:
        path, name = nodeid.split("::")
        assert f"\ndef {name}(" in (REPO / path).read_text("utf-8"), nodeid
    assert len(set(scheduling.FIRST)) == len(scheduling.FIRST)
