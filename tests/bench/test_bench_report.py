"""Smoke tests of the benchmark scripts under ``bench/``: the report at fleet size
(bench/report_speed.py). Each runs in its ``--quick`` mode and prints its table. Not timed tests:
the figures are only checked to be there and plausible, so a broken script fails here, a slow
machine does not."""

from __future__ import annotations

import re

import pytest
from helpers.benchrun import NUM, row, run_bench

pytestmark = [pytest.mark.e2e, pytest.mark.bench]


@pytest.mark.timeout(600)  # the suite's 300 s would cut the script's own bound short
def test_report_speed_quick() -> None:
    out = run_bench("report_speed.py", timeout=580)
    assert re.search(rf"fleet: 52 VMs x 1 days: {NUM} records, {NUM} heartbeats generated", out)
    assert re.search(rf"scheduled-events/range-tiles\s+{NUM} s\s+6 rows", out), out
    assert re.search(rf"every workbook query: {NUM} s in all", out)
    assert re.search(rf"report: built in {NUM} s \({NUM} kB\)", out)
    # the report measured from outside, beside the report before the streaming loader
    for name in ("this tree", "before ("):
        wall, cpu, rss, temp, html = row(out, name)[-5:]
        assert all(re.fullmatch(NUM, v) for v in (wall, cpu, rss, temp, html)), out
        assert 20 < float(rss.replace(",", "")) < 4096, out
    # issue 20's goals: peak memory, wall time and CPU time, each against its figure
    assert len(re.findall(r"\[(?:PASS|MISS)\] (?:peak RSS|wall time|CPU time) <= ", out)) == 3, out
    assert re.search(r"load average \(1, 5, 15 min\): ", out), out
    # issue 20: the Services section's cost, its items summed
    assert re.search(
        rf"the Services section \(scheduled-events\): {NUM} s in all, "
        rf"services-concurrency-risk {NUM} s",
        out,
    ), out
