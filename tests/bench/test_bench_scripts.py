"""Smoke test of the benchmark scripts under ``bench/``: each runs in its ``--quick`` mode and
prints its table. Not a timed test: the figures are only checked to be there and plausible, so a
broken script fails here, a slow machine does not."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.bench]

BENCH = REPO / "bench"
NUM = r"[0-9][0-9,]*(?:\.[0-9]+)?"


def run_bench(script: str, *args: str, timeout: float = 120) -> str:
    proc = subprocess.run([sys.executable, str(BENCH / script), "--quick", *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{script} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def row(out: str, name: str) -> list[str]:
    for line in out.splitlines():
        if line.startswith(name):
            return line[len(name):].split()
    raise AssertionError(f"no row {name!r} in:\n{out}")


@pytest.mark.timeout(180)
def test_poll_cost_quick() -> None:
    out = run_bench("poll_cost.py", "--baseline-src", str(REPO / "src"))
    assert "CPU ms/poll" in out and "peak RSS MB" in out and "load average" in out
    for client in ("agent ", "baseline ", "sample ", "floor http.client ", "floor socket "):
        polls, cpu_ms, _ticks, _startup, peak_mb, *_ = row(out, client)
        assert int(polls) >= 5, out  # every client really polled its simulator
        assert 0 < float(cpu_ms) < 100, out
        assert 5 < float(peak_mb) < 1000, out
    assert len(re.findall(r"\[(?:PASS|MISS)\]", out)) == 4, out
    assert re.search(r"CPU per unchanged poll <= 0.40 ms: .*floors: http.client", out), out


@pytest.mark.timeout(180)
def test_detect_latency_quick() -> None:
    out = run_bench("detect_latency.py")
    assert "8 changes" in out, out
    values = row(out, "commit (agent log time, 1 ms res.)")
    assert len(values) == 5 and all(re.fullmatch(NUM, v) for v in values), out
    p50 = float(values[1])
    assert 0 <= p50 < 5000, out  # a change -> commit latency, not garbage
    assert "[PASS] every FirstSeen reached the file sink" in out, out
    assert re.search(r"\[(PASS|MISS)\] p99 <= poll interval", out), out


@pytest.mark.timeout(180)
def test_replay_rate_quick() -> None:
    out = run_bench("replay_rate.py")
    assert re.search(r"36 events, \d+ document changes, 12 bad observations, 1 agent restart", out), out
    m = re.search(r"; (\d+) records out", out)
    assert m and int(m.group(1)) > 50, out
    for phase in ("in-process trace.read", "in-process replay()", "in-process read+replay",
                  "CLI se-forwarder replay"):
        values = row(out, phase)
        assert all(re.fullmatch(NUM, v) for v in values), out
    assert len(re.findall(r"\[(?:PASS|MISS)\]", out)) == 2, out


def test_trace_generator_is_deterministic(tmp_path: Path) -> None:
    # loaded by path: bench/support is not on the test path
    spec = importlib.util.spec_from_file_location("bench_gen_trace", BENCH / "support" / "gen_trace.py")
    gen = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = gen  # dataclasses look their module up
    spec.loader.exec_module(gen)
    generate = gen.generate
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    info = generate(a, seed=3, seconds=3 * 3600)
    generate(b, seed=3, seconds=3 * 3600)
    assert a.read_bytes() == b.read_bytes()
    assert info["polls"] + 2 == info["lines"] and info["restarts"] == 1
    from se_forwarder import tracefile
    lines = tracefile.read(a)  # a valid trace per the contract
    assert len(lines) == info["lines"]


@pytest.mark.timeout(300)
def test_sink_throughput_quick() -> None:
    out = run_bench("sink_throughput.py", timeout=280)
    for name in ("LA ours (worker + sink)", "LA naive upload(all)", "EH ours (worker + sink)",
                 "EH naive create_batch loop"):
        values = row(out, name)
        assert int(values[0].replace(",", "")) == 5000, out  # every record was delivered
        assert re.fullmatch(NUM, values[2]) and int(values[3]) >= 1, out
    ours = row(out, "LA ours (worker + sink)")
    assert int(ours[5].replace(",", "")) <= 1_000_000, out  # no request above the 1 MB limit
    for sink in ("file sink only", "log_analytics", "event_hubs", "sample poller (requests)",
                 "floor: interpreter", "floor: + pydantic, a model", "floor: + the LA SDKs"):
        assert re.search(rf"{re.escape(sink)}\s+{NUM} MB", out), out
    for sink, goal in (("file sink only", 32), ("log_analytics", 50)):  # beside the goals
        assert re.search(rf"{re.escape(sink)}\s+{NUM} MB  \[(PASS|MISS)\] goal <= {goal} MB", out), out
    for case in ("bare body", "+ partition key", "+ content type, properties",
                 "all (as the sink sends)"):  # where the Event Hubs drain's time goes
        assert re.search(rf"{re.escape(case)}\s+{NUM}\n", out), out


@pytest.mark.timeout(180)
def test_actions_latency_quick() -> None:
    out = run_bench("actions_latency.py")
    for name in ("FirstSeen committed -> hook started", "  baseline: Popen -> process started",
                 "hook exit -> approval POST received", "  baseline: http.client POST -> received"):
        n, *values = row(out, name)
        assert int(n) == 5 and all(re.fullmatch(NUM, v) for v in values), out
        assert 0 <= float(values[0]) < 5000, out  # a latency in ms, not garbage
    for agent in ("no policy", "policy"):
        polls, cpu_ms, peak_mb = row(out, agent)
        assert int(polls) >= 3 and 0 < float(cpu_ms) < 100 and 5 < float(peak_mb) < 1000, out
    assert len(re.findall(r"\[(?:PASS|MISS)\]", out)) == 4, out


@pytest.mark.timeout(300)
def test_collector_rate_quick() -> None:
    """se-forwarder collect and the bare consumer baseline, side by side, on 300 notifications."""
    out = run_bench("collector_rate.py", timeout=280)
    for name in ("bare consumer", "collect"):
        events, secs, rate, _steady, peak_mb = row(out, name)
        assert int(events) == 300 and float(secs) > 0 and float(rate) > 0, out
        assert 5 < float(peak_mb) < 2000, out
    assert "rows stored in Log Analytics: 300 (300 distinct RecordIds)" in out, out


def test_report_speed_quick() -> None:
    out = run_bench("report_speed.py", timeout=300)
    assert re.search(rf"fleet: 52 VMs x 2 days: {NUM} records, {NUM} heartbeats generated", out)
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
    assert re.search(rf"the Services section \(scheduled-events\): {NUM} s in all, "
                     rf"services-concurrency-risk {NUM} s", out), out


def test_query_sql_quick() -> None:
    out = run_bench("query_sql.py", timeout=300)
    assert "dashboards/ of main (before) and of this tree (after)" in out, out
    values = row(out, "agent-events.kql")  # SQL kB before, after; planning s before, after
    assert len(values) == 4 and all(re.fullmatch(NUM, v) for v in values), out
    assert float(values[1]) > 1 and 0 < float(values[3]) < 60, out
    assert re.search(rf"total over 4 queries in both: SQL {NUM} kB -> {NUM} kB, planning {NUM} s -> "
                     rf"{NUM} s CPU", out), out


def test_report_memory_quick() -> None:
    out = run_bench("report_memory.py", timeout=300)
    rows = re.findall(rf"^\s*({NUM})\s+({NUM})\s+(this tree|before \(\w+\))\s+({NUM})\s+({NUM})\s+"
                      rf"({NUM})\s+({NUM})$", out, flags=re.MULTILINE)
    assert [r[2].split()[0] for r in rows] == ["this", "before", "this", "before"], out
    assert all(20 < float(r[5].replace(",", "")) < 4096 for r in rows), out  # peak RSS, MB
    assert "rows lost" not in out


def test_workbook_rows_quick() -> None:
    out = run_bench("workbook_rows.py", timeout=300)
    kind, span, rows, limit, verdict = row(out, "agent-health/fleet")
    assert (kind, span, limit, verdict) == ("query", "7d", "10,000", "ok") and int(rows) > 0
    assert re.search(rf"largest result: {NUM} rows of 10,000", out)


def test_coarse_heartbeats_keep_the_recent_days_and_thin_the_rest() -> None:
    from datetime import timedelta

    from helpers.fleetview import ts

    from se_forwarder.timefmt import format_ms
    from se_forwarder_testbed.fleet import FleetSpec, generate

    fine, coarse = generate(FleetSpec(days=4)), generate(FleetSpec(days=4, fine_days=1))
    since = ts(format_ms(fine.truth.end)) - timedelta(hours=23)

    def recent(f) -> int:
        return sum(1 for r in f.heartbeats if ts(r["TimeGenerated"]) >= since)

    assert len(coarse.heartbeats) < 0.5 * len(fine.heartbeats)
    assert recent(coarse) > 0.95 * recent(fine)


@pytest.mark.timeout(300)
def test_spool_bounds_quick() -> None:
    out = run_bench("spool_bounds.py", timeout=280)
    assert "spool.max_bytes 1.0 MiB" in out, out
    mine = row(out, "this checkout")
    assert all(re.fullmatch(NUM, v) for v in mine[:7]), out  # sizes, tracker state, status.json
    assert float(mine[0]) > 0 and int(mine[6]) > 0, out  # a database; the bound dropped rows
    assert len(re.findall(r"\[(?:PASS|MISS)\]", out)) == 3, out
