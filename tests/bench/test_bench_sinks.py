"""Smoke tests of the benchmark scripts under ``bench/``: the sinks and the collector. Each runs
in its ``--quick`` mode and prints its table. Not timed tests: the figures are only checked to be
there and plausible, so a broken script fails here, a slow machine does not."""

from __future__ import annotations

import re

import pytest
from helpers.benchrun import NUM, row, run_bench

pytestmark = [pytest.mark.e2e, pytest.mark.bench]


@pytest.mark.timeout(300)
def test_sink_throughput_quick() -> None:
    out = run_bench("sink_throughput.py", timeout=280)
    for name in (
        "LA ours (worker + sink)",
        "LA naive upload(all)",
        "EH ours (worker + sink)",
        "EH naive create_batch loop",
    ):
        values = row(out, name)
        assert int(values[0].replace(",", "")) == 2000, out  # every record was delivered
        assert re.fullmatch(NUM, values[2]) and int(values[3]) >= 1, out
    ours = row(out, "LA ours (worker + sink)")
    assert int(ours[5].replace(",", "")) <= 1_000_000, out  # no request above the 1 MB limit
    for sink in (
        "file sink only",
        "log_analytics",
        "event_hubs",
        "sample poller (requests)",
        "floor: interpreter",
        "floor: + pydantic, a model",
        "floor: + the LA SDKs",
    ):
        assert re.search(rf"{re.escape(sink)}\s+{NUM} MB", out), out
    for sink in ("file sink only", "log_analytics", "event_hubs"):  # beside its floor (5 MB)
        assert re.search(
            rf"{re.escape(sink)}\s+{NUM} MB\s+{NUM} MB\s+[+-]{NUM} MB  \[(PASS|MISS)\] over floor",
            out,
        ), out
    for sink, goal in (("file sink only", 32), ("log_analytics", 50)):  # beside issue 19's goals
        assert re.search(rf"{re.escape(sink)}\s.*\[(PASS|MISS)\] <= {goal} MB", out), out
    # the Event Hubs sink beside the SDK's ceiling, with the ratio (issue 30)
    assert re.search(r"add, as the sink sends\s+" + NUM + r"/s  ours\s+\d+%", out), out
    # what any sink that adds the contract's messages can reach of add without their key
    assert re.search(r"bound: add alone for the contract's .* runs at \d+% of add", out), out
    # drains read beside add at once, by wall and by CPU time
    assert re.search(r"median: wall \d+%, CPU \d+% \(goal >= 85%\)", out), out
    for case in (
        "bare body",
        "+ partition key",
        "+ content type, properties",
        "all (as the sink sends)",
        "all, the sink's message form",
    ):  # where the Event Hubs drain's time goes
        assert re.search(rf"{re.escape(case)}\s+{NUM}\n", out), out


@pytest.mark.timeout(300)
def test_collector_rate_quick() -> None:
    """se-forwarder collect and the bare consumer baseline, side by side, on 300 notifications."""
    out = run_bench("collector_rate.py", timeout=280)
    for name in ("bare consumer", "collect"):
        events, secs, rate, _steady, peak_mb = row(out, name)
        assert int(events) == 300 and float(secs) > 0 and float(rate) > 0, out
        assert 5 < float(peak_mb) < 2000, out
    assert "rows stored in Log Analytics: 300 (300 distinct RecordIds)" in out, out
