"""Smoke tests of the benchmark scripts under ``bench/``: the agent's polls, detection, replay,
actions and spool bounds. Each runs in its ``--quick`` mode and prints its table. Not timed tests:
the figures are only checked to be there and plausible, so a broken script fails here, a slow
machine does not."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from helpers import REPO
from helpers.benchrun import BENCH, NUM, row, run_bench

pytestmark = [pytest.mark.e2e, pytest.mark.bench]


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
    assert re.search(
        r"36 events, \d+ document changes, 12 bad observations, 1 agent restart", out
    ), out
    m = re.search(r"; (\d+) records out", out)
    assert m and int(m.group(1)) > 50, out
    for phase in (
        "in-process trace.read",
        "in-process replay()",
        "in-process read+replay",
        "CLI se-forwarder replay",
    ):
        values = row(out, phase)
        assert all(re.fullmatch(NUM, v) for v in values), out
    assert len(re.findall(r"\[(?:PASS|MISS)\]", out)) == 2, out


def test_trace_generator_is_deterministic(tmp_path: Path) -> None:
    # loaded by path: bench/support is not on the test path
    spec = importlib.util.spec_from_file_location(
        "bench_gen_trace", BENCH / "support" / "gen_trace.py"
    )
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


@pytest.mark.timeout(180)
def test_actions_latency_quick() -> None:
    out = run_bench("actions_latency.py")
    for name in (
        "FirstSeen committed -> hook started",
        "  baseline: Popen -> process started",
        "hook exit -> approval POST received",
        "  baseline: http.client POST -> received",
    ):
        n, *values = row(out, name)
        assert int(n) == 5 and all(re.fullmatch(NUM, v) for v in values), out
        assert 0 <= float(values[0]) < 5000, out  # a latency in ms, not garbage
    for agent in ("no policy", "policy"):
        polls, cpu_ms, peak_mb = row(out, agent)
        assert int(polls) >= 3 and 0 < float(cpu_ms) < 100 and 5 < float(peak_mb) < 1000, out
    assert len(re.findall(r"\[(?:PASS|MISS)\]", out)) == 4, out


@pytest.mark.timeout(300)
def test_spool_bounds_quick() -> None:
    out = run_bench("spool_bounds.py", timeout=280)
    assert "spool.max_bytes 1.0 MiB" in out, out
    mine = row(out, "this checkout")
    assert all(re.fullmatch(NUM, v) for v in mine[:7]), out  # sizes, tracker state, status.json
    assert float(mine[0]) > 0 and int(mine[6]) > 0, out  # a database; the bound dropped rows
    assert len(re.findall(r"\[(?:PASS|MISS)\]", out)) == 3, out
