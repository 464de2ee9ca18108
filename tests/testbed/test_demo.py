"""`se-forwarder demo`: the whole pipeline locally, read as a person reads it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from se_forwarder_testbed.simulator.scenario import builtin_names, load_scenario


@pytest.mark.parametrize("name", builtin_names())
def test_every_built_in_scenario_plays_in_about_a_minute_by_default(name):
    scenario = load_scenario(name)
    assert 20 <= scenario.end / scenario.speed <= 75, (name, scenario.end, scenario.speed)


@pytest.mark.process
@pytest.mark.e2e
def test_the_timeline_names_each_event_and_keeps_one_clock(tmp_path):
    r = subprocess.run([sys.executable, "-m", "se_forwarder.cli", "demo", "--scenario", "demo",
                        "--speed", "240", "--dir", str(tmp_path / "d")],
                       capture_output=True, text=True, timeout=180, check=False)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    lines = out.splitlines()
    header = next(line for line in lines if line.strip().startswith("time"))
    assert header.split()[:6] == ["time", "EventId", "VM", "EventType", "Source", "Phase"]
    timeline = lines[lines.index(header) + 2:]
    timeline = timeline[:next(i for i, line in enumerate(timeline) if line.startswith("---"))]
    assert timeline and all(re.match(r"^\s*\d+\.\ds ", line) for line in timeline), timeline
    rows = [line.split() for line in timeline if "…" not in line]
    ids = {row[1] for row in rows}
    assert len(ids) >= 5 and all(re.fullmatch(r"[0-9a-f]{8}", i) for i in ids)
    assert {row[4] for row in rows} >= {"Platform", "User"}
    # The scripted 503 and empty body are logged on the timeline's clock, not the wall clock.
    faults = [line for line in r.stderr.splitlines() if "WARNING" in line]
    assert faults and all(re.match(r"^\s*\d+\.\ds WARNING", f) for f in faults), faults
    assert not any(re.search(r"\d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT", f) for f in faults), faults
    assert "Summary" in out
    # the demo ends with the fleet view of what it delivered, and names the file
    last = out.strip().splitlines()[-1]
    m = re.match(r"Fleet view report: (\S+\.html) ", last)
    assert m, last
    page = Path(m.group(1)).read_text("utf-8")
    assert 'data-metric="Events"' in page and "Fleet view: Azure Scheduled Events" in page
    # the demo VM's service tag reached the records (agent.tags): its service is accounted for
    impact = page[page.index('data-item="services-impact-by-month"'):]
    impact = impact[:impact.index("</section>")]
    assert re.search(r">\s*web\s*<", impact), impact[:2000]


def test_the_readme_demo_command_installs_what_the_demo_uses():
    """`bash scripts/demo.sh` on a fresh machine must reach the report, not skip it."""
    root = Path(__file__).resolve().parents[2]
    m = re.search(r"scripts/setup\.sh\s+(\S+)", (root / "scripts" / "demo.sh").read_text())
    assert m, "demo.sh no longer calls setup.sh with its extras"
    assert {"azure", "standins", "report"} <= set(m.group(1).split(","))


@pytest.mark.process
@pytest.mark.e2e
def test_ctrl_c_stops_the_demo_cleanly_and_says_so(tmp_path):
    """Ctrl-C left the state looking like a crash (`status`: did not stop cleanly)."""
    import json
    import os
    import signal
    import time

    out_dir = tmp_path / "d"
    proc = subprocess.Popen([sys.executable, "-m", "se_forwarder.cli", "demo", "--scenario", "demo",
                             "--no-log-analytics", "--dir", str(out_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (out_dir / "records.jsonl").exists():
            time.sleep(0.1)  # the agent has committed and delivered a record: it is running
        assert (out_dir / "records.jsonl").exists()
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "interrupted: stopping the agent" in out and "stopped cleanly" in out, out
    assert "Traceback" not in err, err
    r = subprocess.run([sys.executable, "-m", "se_forwarder.cli", "status", "--json",
                        "--state-dir", str(out_dir / "state")], capture_output=True, text=True,
                       timeout=60, check=False)
    status = json.loads(r.stdout)
    assert status["state"] == "stopped" and status["status"]["stopped"] is True, status
