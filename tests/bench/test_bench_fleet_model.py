"""Smoke test of bench/fleet_model.py in its ``--quick`` mode (2 cells): the model's queries on a
mixed fleet beside main's, each timed. A module of its own, apart from report_speed's, so
``--dist loadfile`` runs the two long scripts on two workers at once. Not a timed test: the
figures are only checked to be there, so a broken script fails here, a slow machine does not."""

from __future__ import annotations

import re

import pytest
from helpers.benchrun import NUM, run_bench

pytestmark = [pytest.mark.e2e, pytest.mark.bench]


@pytest.mark.timeout(600)  # the suite's 300 s would cut the script's own bound short
def test_fleet_model_quick() -> None:
    """bench/fleet_model.py: the model's queries on a mixed fleet beside main's, each timed."""
    out = run_bench("fleet_model.py", timeout=580)
    assert re.search(rf"mixed fleet: 58 VMs \(36 with an agent\), {NUM} heartbeats", out), out
    for q in ("fleet-vms.kql", "services-concurrency-risk.kql", "alerts/impactful-event-unwatched"):
        assert re.search(rf"{re.escape(q)}\S*\s+{NUM}/{NUM}\s+\d+\s", out), out  # first/second
    assert re.search(rf"peak RSS {NUM} MB", out), out
