"""`se-forwarder demo`: the whole pipeline locally, a fleet read as a person reads it: the terminal,
what Log Analytics (the stand-in) holds, and the report, all in scenario time."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import chromium

from se_forwarder_testbed.demo import fleet as fleets
from se_forwarder_testbed.simulator.scenario import builtin_names, load_scenario

LINE = re.compile(
    r"^(\d\d:\d\d:\d\d)  (\S+)\s+([0-9A-F]{8}) (\w+)\s+(\w+)\s+(\w+)\s+(.*)$", re.IGNORECASE
)


def _seconds(hms: str) -> int:
    h, m, s = (int(x) for x in hms.split(":"))
    return h * 3600 + m * 60 + s


def _apart(a: str, b: str) -> int:
    """Seconds between two times of day (HH:MM:SS), across midnight."""
    d = abs(_seconds(a) - _seconds(b))
    return min(d, 86400 - d)


@pytest.mark.parametrize("name", builtin_names())
def test_every_built_in_scenario_plays_in_about_a_minute_by_default(name):
    scenario = load_scenario(name)
    assert 20 <= scenario.end / scenario.speed <= 75, (name, scenario.end, scenario.speed)


def test_the_demo_fleet_is_two_services_with_the_promised_cases():
    f = fleets.load("fleet")
    assert 40 <= f.end / f.speed <= 50
    assert f.services == ["checkout", "payments"] and len(f.vms) == 8
    by = {vm.name: vm for vm in f.vms}
    assert [vm.name for vm in f.vms if not vm.agent] == ["payments-3"]
    kinds = {name: {o.kind for o in vm.outages} for name, vm in by.items() if vm.outages}
    assert kinds == {
        "checkout_1": {"gone"},
        "checkout-spot_0": {"gone"},
        "payments-1": {"network", "reboot"},
    }
    types = {(e.type, tuple(e.resources)) for e in f.events}
    assert ("Preempt", ("checkout-spot_0",)) in types
    assert not any(e.type == "Terminate" for e in f.events)  # the deletion comes unannounced
    # every member of a group sees the group's events; other VMs do not
    spot = f.scenario(by["checkout-spot_1"])
    assert [e.type for e in spot.events] == ["Preempt"]
    assert {e.id for e in f.scenario(by["payments-1"]).events} == {
        e.id for e in f.scenario(by["payments-2"]).events
    }
    # ids are the same in every run (tests and people can name them)
    assert (
        fleets.load("fleet").event_id(0)
        == f.event_id(0)
        == f.scenario(by["checkout_0"]).events[0].id
    )


def test_a_single_vm_scenario_is_a_fleet_of_one():
    f = fleets.load("spot-preempt")
    assert len(f.vms) == 1 and f.vms[0].name == "spot_3" and f.vms[0].agent
    assert f.end == load_scenario("spot-preempt").end
    assert f.scenario(f.vms[0]).events[0].type == "Preempt"


@dataclass
class Play:
    """One `se-forwarder demo` process, its directory and its terminal (files, not pipes: a run
    nobody reads yet must never wait on a full pipe); its end read once."""

    dir: Path
    proc: subprocess.Popen[bytes]
    result: subprocess.CompletedProcess[str] | None = None

    @classmethod
    def start(cls, directory: Path, *args: str) -> Play:
        with open(f"{directory}.out", "wb") as out, open(f"{directory}.err", "wb") as err:
            return cls(
                directory,
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "se_forwarder.cli",
                        "demo",
                        *args,
                        "--dir",
                        str(directory),
                    ],
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                ),
            )

    def finished(self) -> subprocess.CompletedProcess[str]:
        if self.result is None:
            self.proc.wait(timeout=600)
            self.result = subprocess.CompletedProcess(
                self.proc.args,
                self.proc.returncode,
                Path(f"{self.dir}.out").read_text("utf-8"),
                Path(f"{self.dir}.err").read_text("utf-8"),
            )
        return self.result


SINGLE = "test_a_single_vm_scenario_keeps_one_clock_for_timeline_and_warnings"  # reads "single"


@pytest.fixture(scope="module")
def plays(request, tmp_path_factory) -> Iterator[dict[str, Play]]:
    """The module's two full demo runs, the default fleet (``demo``) and the single-VM scenario
    at 120x, started together when the selected tests need them: each plays its scenario in real
    time, mostly waiting, so they overlap rather than add up."""
    base = tmp_path_factory.mktemp("demo")
    needed = [item for item in request.session.items if item.module is request.module]
    started = {}
    if any("demo" in item.fixturenames for item in needed):
        started["fleet"] = Play.start(base / "d")
    if any(item.originalname == SINGLE for item in needed):
        started["single"] = Play.start(base / "s", "--scenario", "demo", "--speed", "120")
    yield started
    for play in started.values():
        if play.proc.poll() is None:
            play.proc.kill()
            play.proc.wait()


@pytest.fixture(scope="module")
def demo(plays) -> dict:
    """`se-forwarder demo` (the default fleet) once: its terminal, what Log Analytics holds."""
    d = plays["fleet"].dir
    r = plays["fleet"].finished()
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows: dict[str, list[dict]] = defaultdict(list)
    for line in (d / "log-analytics.jsonl").read_text("utf-8").splitlines():
        item = json.loads(line)
        rows[item["stream"]].append(item["record"])
    last = r.stdout.strip().splitlines()[-1]
    m = re.match(r"Fleet view report: (\S+\.html) .* --now (\S+) --arg-file \S+`", last)
    assert m, last
    return {
        "dir": d,
        "out": r.stdout,
        "err": r.stderr,
        "records": rows["Custom-ScheduledEvents"],
        "beats": rows["Custom-ScheduledEventsAgent"],
        "platform": rows["Custom-ScheduledEventsPlatform"],
        "report": Path(m.group(1)),
        "now": m.group(2),
    }


def _timeline(out: str) -> list[tuple[str, ...]]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("time UTC")) + 2
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("---"))
    return [m.groups() for line in lines[start:end] if (m := LINE.match(line))]


@pytest.mark.process
@pytest.mark.tls
@pytest.mark.e2e
def test_the_fleet_reaches_log_analytics_two_services_seven_agents(demo):
    beats, records = demo["beats"], demo["records"]
    assert {b["VmName"] for b in beats} == {
        "checkout_0",
        "checkout_1",
        "checkout_2",
        "checkout-spot_0",
        "checkout-spot_1",
        "payments-1",
        "payments-2",
    }
    assert {r["Tags"]["service"] for r in records} == {"checkout", "payments"}
    assert {b["Tags"]["service"] for b in beats} == {"checkout", "payments"}
    assert len({r["RecordId"] for r in records}) == len(records)  # one copy each, here


@pytest.mark.process
@pytest.mark.tls
@pytest.mark.e2e
def test_the_spot_eviction_is_told_by_a_sibling_and_by_azure(demo):
    mine = [
        r
        for r in demo["records"]
        if r["VmName"] == "checkout-spot_0" and r["EventType"] == "Preempt"
    ]
    assert sorted(r["Phase"] for r in mine) == ["FirstSeen", "Started"]  # never its Removed
    sibling = [
        r
        for r in demo["records"]
        if r["VmName"] == "checkout-spot_1" and r["EventId"] == mine[0]["EventId"]
    ]
    removed = [r for r in sibling if r["Phase"] == "Removed"]
    assert len(removed) == 1 and removed[0]["Outcome"] == "Completed"
    assert removed[0]["AffectsThisVm"] is False
    azure = {p["EventStatus"] for p in demo["platform"] if p["EventId"] == mine[0]["EventId"]}
    assert "Completed" in azure and {
        p["VmName"] for p in demo["platform"] if p["EventId"] == mine[0]["EventId"]
    } == {"checkout-spot_0"}


@pytest.mark.process
@pytest.mark.tls
@pytest.mark.e2e
def test_the_deleted_instance_is_deleted_not_silent_without_a_terminate(demo):
    from se_forwarder.timefmt import parse_iso_ms

    assert any("checkout_1" in line and "scale-in" in line for line in demo["out"].splitlines())
    # deleted at 20:30 of the 45 minutes: nothing of it made after, so silent at the end
    end = parse_iso_ms(demo["now"] + "Z")
    mine = [
        parse_iso_ms(r["TimeGenerated"])
        for r in demo["beats"] + demo["records"]
        if r["VmName"] == "checkout_1"
    ]
    assert mine and max(mine) <= end - 24 * 60_000, (max(mine), end)
    assert not any(r["EventType"] == "Terminate" for r in demo["records"])
    # Azure's inventory (the collector's Resource Graph pass) no longer lists it: deleted, known
    # from Azure, so never paged as a silent agent
    listed = [p for p in demo["platform"] if p["RecordType"] == "Inventory"]
    assert {p["VmName"] for p in listed} >= {"checkout_1", "payments-3"}
    page = demo["report"].read_text("utf-8")
    silent = page.split('data-item="silent-agents"', 1)[1].split("</section>", 1)[0]
    assert "checkout_1" not in silent


@pytest.mark.process
@pytest.mark.tls
@pytest.mark.e2e
def test_the_late_vm_delivers_its_reboot_after_its_network_returns(demo):
    from se_forwarder.timefmt import parse_iso_ms

    mine = [r for r in demo["records"] if r["VmName"] == "payments-1"]
    late = [
        r
        for r in mine
        if parse_iso_ms(r["_IngestionTime"]) - parse_iso_ms(r["TimeGenerated"]) > 10 * 60_000
    ]
    assert {r["Phase"] for r in late} >= {"Started", "Removed"}
    reboot = [
        r
        for r in mine
        if r["EventType"] == "Reboot" and r["AffectsThisVm"] and r["Phase"] == "Removed"
    ]
    assert len(reboot) == 1 and reboot[0]["Outcome"] == "Completed"
    lag = [
        parse_iso_ms(b["_IngestionTime"]) - parse_iso_ms(b["TimeGenerated"])
        for b in demo["beats"]
        if b["VmName"] == "payments-1"
    ]
    assert max(lag) > 10 * 60_000
    assert "rows arrived up to" in next(
        line for line in demo["out"].splitlines() if line.strip().startswith("payments-1 ")
    )


@pytest.mark.process
@pytest.mark.tls
@pytest.mark.e2e
def test_the_vm_without_an_agent_appears_with_verified_outcomes(demo):
    rows = [p for p in demo["platform"] if p["VmName"] == "payments-3"]
    assert rows and not any(b["VmName"] == "payments-3" for b in demo["beats"])
    assert {p["Channel"] for p in rows} == {"resource-graph"}
    by_event = defaultdict(set)
    for p in rows:
        if p["RecordType"] == "ScheduledEvent":
            by_event[p["EventId"]].add(p["EventStatus"])
    # the reboot it went through (Resource Graph read each minute saw all three statuses), and
    # the one announced for tonight
    assert sorted(map(sorted, by_event.values())) == [
        ["Completed", "Scheduled", "Started"],
        ["Scheduled"],
    ]
    assert any(p["RecordType"] == "Annotation" for p in rows)
    page = demo["report"].read_text("utf-8")
    # Resource Graph as the scenario ended (--arg-file): its panels are in, none left out
    gaps = page.split('data-item="coverage-gaps"', 1)[1].split("</section>", 1)[0]
    assert "payments-3" in gaps and re.search(
        r"resource-graph\.json \(\d+ scheduled-event rows", page
    )
    verified = page.split('data-item="verified-outcomes"', 1)[1].split("</section>", 1)[0]
    # the evicted Spot VM's agent saw its Preempt start, then the VM went: Completed (evicted),
    # which agrees with Azure's Completed (only events with a VM not agreeing are listed)
    assert "payments-3" in verified and "checkout-spot_0" not in verified
    agentless = page.split('data-item="agentless-vms"', 1)[1].split("</section>", 1)[0]
    assert "payments-3" in agentless and "checkout" not in agentless
    # the VMs Resource Graph lists as the scenario ends (the deleted and the evicted are gone):
    # the agent-health workbook's never-reported merges run, and only payments-3 is in them
    never = page.split('data-item="never-reported"', 1)[1].split("</section>", 1)[0]
    assert "payments-3" in never and "checkout" not in never
    assert "have no result" not in page
    assert re.search(r"resource-graph\.json \(\d+ scheduled-event rows, 6 VM rows\)", page)
    summary = demo["out"].split("Summary", 1)[1]
    assert re.search(r"payments-3\s+payments\s+no\s+0\s+0\s+\d+\s+no agent", summary), summary


@pytest.mark.process
@pytest.mark.tls
@pytest.mark.e2e
def test_the_terminal_and_the_report_tell_the_same_scenario_time(demo):
    out = demo["out"]
    assert "Every time shown here, in the records and in the report is scenario time" in out
    timeline = _timeline(out)
    assert len(timeline) >= 30 and len({row[1] for row in timeline}) == 7
    records = demo["records"]
    for at, vm, eid, _type, _source, phase, _ in timeline:
        match = [
            r
            for r in records
            if r["VmName"] == vm
            and r["Phase"] == phase
            and r["EventId"].upper().startswith(eid.upper())
        ]
        assert match, (vm, eid, phase)
        assert at in {r["TimeGenerated"][11:19] for r in match}, (at, match)
    page = demo["report"].read_text("utf-8")
    assert "every time is scenario time" in page
    now = demo["now"]
    assert f"{now[:10]} {now[11:16]}" in page  # "Evaluated at": the scenario's end
    # the hardware failure's start, as the terminal printed it and as the report shows it
    hw = next(
        row
        for row in timeline
        if row[1] == "checkout_2" and row[5] == "Started" and "no notice" in row[6]
    )
    started = page.split('data-item="started-24h"', 1)[1].split("</section>", 1)[0]
    row = next(tr for tr in started.split("<tr>") if hw[2].upper() in tr.upper())
    shown = re.findall(r"\d{4}-\d\d-\d\d (\d\d:\d\d)", row)
    assert shown and _apart(shown[0] + ":00", hw[0][:5] + ":00") <= 60, (shown, hw)


@pytest.mark.process
@pytest.mark.tls
@pytest.mark.e2e
def test_the_report_shows_both_services_and_every_running_agent(demo):
    page = demo["report"].read_text("utf-8")
    impact = page.split('data-item="services-impact-by-month"', 1)[1].split("</section>", 1)[0]
    assert re.search(r">\s*checkout\s*<", impact) and re.search(r">\s*payments\s*<", impact)
    # tonight's reboots of payments-1 and payments-2 overlap; the service has 3 VMs (payments-3
    # runs no agent: Azure's inventory and record know it)
    risk = page.split('data-item="services-concurrency-risk"', 1)[1].split("</section>", 1)[0]
    assert "payments-1, payments-2" in risk and "checkout" not in risk, risk
    assert re.search(r">\s*3\s*<", risk), risk  # ServiceVms
    upcoming = page.split('data-item="upcoming-impactful"', 1)[1].split("</section>", 1)[0]
    assert "payments-3" in upcoming, upcoming
    # every view counts the appliance with no agent where it is at risk: open now (its Reboot
    # tonight) and started in the last 24 h (the Reboot it went through)
    for name in ("open-events", "started-24h"):
        panel = page.split(f'data-item="{name}"', 1)[1].split("</section>", 1)[0]
        header = [
            re.sub("<[^>]+>", "", h).strip()
            for h in re.findall(r"<th[^>]*>(.*?)</th>", panel, re.S)
        ]
        hit, names = header.index("VMs hit"), header.index("VM names")
        rows = [r for r in _cells(panel) if len(r) > names and "payments-3" in r[names]]
        assert rows and all(int(r[hit]) >= 1 for r in rows), (name, panel)
    tiles = dict(re.findall(r'data-metric="([^"]+)"><div class="tile-value">([^<]*)</div>', page))
    # at the scenario's end: checkout_0, checkout_2, checkout-spot_1, payments-1, payments-2;
    # checkout_1 scaled in (the inventory) and checkout-spot_0 evicted: deleted, none silent
    assert tiles["VMs covered"] == "5" and tiles["Agents silent"] == "0", tiles
    assert tiles["Deleted or evicted"] == "2", tiles


def _cells(panel: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", panel, re.S)
    return [
        [re.sub("<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
        for r in rows
    ]


@pytest.mark.process
@pytest.mark.tls
@pytest.mark.e2e
def test_the_terminal_and_the_report_agree_and_spell_outcomes_one_way(demo):
    """The terminal's outcomes are the report's verified outcomes (same rows, same query): the
    evicted Spot VM's Preempt is Completed (evicted), never "Started (open)"; the failed
    deliveries the terminal counts are the report's; Azure's "Canceled", never "Cancelled"."""
    out, page = demo["out"], demo["report"].read_text("utf-8")
    summary = out.split("Summary", 1)[1]
    assert "Cancelled" not in out and "Cancelled" not in page
    assert re.search(r"Redeploy\s+payments-2\s+Canceled\s+Canceled\s+agrees", summary), summary
    assert re.search(
        r"Preempt\s+checkout-spot_0\s+Completed \(evicted\)\s+Completed\s+agrees", summary
    ), summary
    assert "(open)" not in summary
    assert re.search(r"payments-3\s+no record\s+Completed\s+no agent record", summary), summary
    fleet = page.split('data-item="fleet"', 1)[1].split("</section>", 1)[0]
    header = re.findall(r"<th[^>]*>(.*?)</th>", fleet, re.S)
    col = [re.sub("<[^>]+>", "", h).strip() for h in header].index("Failed deliveries")
    failed = sum(int(r[col].replace(",", "") or 0) for r in _cells(fleet) if len(r) > col)
    said = re.search(r"\((\d+) failed deliveries", summary)
    assert (int(said[1]) if said else 0) == failed, (said, failed)


@pytest.mark.process
@pytest.mark.tls
@pytest.mark.external
@pytest.mark.e2e
def test_the_demo_report_reads_well_in_chromium(demo, tmp_path):
    """Rendered at 1400 px: no value wraps and no header breaks inside a word ("Platfor m"),
    numbers right-aligned, the page never scrolls sideways, and the Services tables fit their
    panels."""
    got = chromium.open_page(demo["report"], tmp_path / "demo-report.png", height=3000)
    assert got.probe["cells"] > 300, got.probe
    assert got.probe["wrapped"] == [] and got.probe["numLeft"] == [], got.probe
    assert got.probe["overflow"] is False and got.probe["belowOut"] == [], got.probe
    assert not [p for p in got.probe["sideways"] if p.startswith("services")], got.probe
    assert chromium.colours(got.png) > 50


@pytest.mark.process
@pytest.mark.e2e
def test_a_single_vm_scenario_keeps_one_clock_for_timeline_and_warnings(plays):
    r = plays["single"].finished()
    assert r.returncode == 0, r.stderr
    timeline = _timeline(r.stdout)
    ids = {row[2] for row in timeline}
    assert len(ids) >= 5 and {row[4] for row in timeline} >= {"Platform", "User"}
    assert {row[1] for row in timeline} == {"demo-vm"}
    origin = re.search(r"of maintenance from (\d\d:\d\d:\d\d) UTC", r.stdout).group(1)
    # The scripted 503 (scenario 30:00) and empty body (40:00) are logged in scenario time too,
    # at the agent's next poll (a busy machine may hold it a second: 2 minutes here), not at the
    # wall clock's 25 s of playing.
    faults = [line for line in r.stderr.splitlines() if "WARNING" in line]
    assert len(faults) == 2 and all(re.match(r"^\d\d:\d\d:\d\d WARNING", f) for f in faults), faults
    for line, at in zip(faults, (1800, 2400), strict=True):
        assert at <= _apart(line[:8], origin) <= at + 120, (origin, faults)
    assert "Summary" in r.stdout and "Fleet view report:" in r.stdout.strip().splitlines()[-1]


def test_the_readme_demo_command_installs_what_the_demo_uses():
    """`bash scripts/demo.sh` on a fresh machine must reach the report, not skip it."""
    root = Path(__file__).resolve().parents[2]
    m = re.search(r"scripts/setup\.sh\s+(\S+)", (root / "scripts" / "demo.sh").read_text())
    assert m, "demo.sh no longer calls setup.sh with its extras"
    assert {"azure", "report", "collector"} <= set(m.group(1).split(","))
    # the demo is the test bed's command: setup.sh installs that distribution beside the agent's
    assert re.search(r"pip install .* -e \./testbed\b", (root / "scripts" / "setup.sh").read_text())


@contextlib.contextmanager
def _ctrl_c_as_from_a_terminal() -> Iterator[None]:
    """Children started inside get Ctrl-C's default action, as a terminal's foreground command
    has it. A run started in the background (`pytest ... &`, nohup) has SIGINT ignored, which its
    children inherit, and Python then installs no KeyboardInterrupt handler: the demo played to
    its end. A handler (not an ignore) is reset to the default by exec."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.process
@pytest.mark.e2e
def test_ctrl_c_stops_the_demo_cleanly_and_says_so(tmp_path):
    """Ctrl-C left the state looking like a crash (`status`: did not stop cleanly)."""
    out_dir = tmp_path / "d"
    vm = out_dir / "vms" / "demo-vm"
    with _ctrl_c_as_from_a_terminal():
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "se_forwarder.cli",
                "demo",
                "--scenario",
                "demo",
                "--no-log-analytics",
                "--dir",
                str(out_dir),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (vm / "records.jsonl").exists():
            time.sleep(0.1)  # the agent has committed and delivered a record: it is running
        assert (vm / "records.jsonl").exists()
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "interrupted: stopping the agents" in out and "stopped cleanly" in out, out
    assert "Traceback" not in err, err
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "se_forwarder.cli",
            "status",
            "--json",
            "--state-dir",
            str(vm / "state"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    status = json.loads(r.stdout)
    assert status["state"] == "stopped" and status["status"]["stopped"] is True, status
