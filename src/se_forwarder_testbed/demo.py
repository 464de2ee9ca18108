"""``se-forwarder demo``: the whole pipeline on this machine, no Azure account, no network.

The IMDS simulator plays a sped-up scenario (with its managed-identity token endpoint), the real
agent polls it, commits records to its outbox and delivers them through the real Logs Ingestion
SDK into the local Log Analytics stand-in (and a JSON Lines file). The summary at the end is read
back from the stand-in, as a user would query Log Analytics.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TextIO

from se_forwarder import contract, logs
from se_forwarder.commands.args import directory, positive_float
from se_forwarder.config import Config
from se_forwarder.errors import SeForwarderError

MARKER = ".se-forwarder-demo"
PROGRESS_EVERY = 10.0  # seconds without a record before a progress line


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", default="demo", help="built-in scenario name or file (default: demo)")
    parser.add_argument("--speed", type=positive_float, help="override the scenario's speed-up")
    parser.add_argument("--dir", type=directory, default=Path("demo-output"),
                        help="where state and records go (default: ./demo-output)")
    parser.add_argument("--no-log-analytics", action="store_true",
                        help="file sink only (skip the Logs Ingestion stand-in)")


def run(args: argparse.Namespace) -> int:
    from .simulator.scenario import load_scenario
    from .simulator.server import Simulator
    from .standins.tokens import TokenAuthority

    out = sys.stdout
    try:
        scenario = load_scenario(args.scenario)
    except SeForwarderError as exc:
        print(f"se-forwarder demo: {exc}", file=sys.stderr)
        return 2
    base = Path(args.dir).resolve()
    if base.exists() and any(base.iterdir()) and not (base / MARKER).exists():
        print(f"se-forwarder demo: {base} exists and is not a demo directory; refusing to empty it "
              "(choose another --dir)", file=sys.stderr)
        return 2
    shutil.rmtree(base, ignore_errors=True)  # only ever a previous demo's output
    base.mkdir(parents=True)
    (base / MARKER).write_text("made by se-forwarder demo; emptied by the next run\n")
    logs.setup("text", "warning")  # the timeline below is the demo's output; problems still show

    authority = TokenAuthority()
    sim = Simulator(scenario, speed=args.speed, token_authority=authority)
    standin = None
    if not args.no_log_analytics:
        try:
            import azure.monitor.ingestion  # noqa: F401 - the sink needs it

            from .standins.logs_ingestion import LogsIngestionStandIn
        except ImportError as exc:
            print(f"(Log Analytics stand-in unavailable: {exc}; file sink only)", file=out)
        else:
            standin = LogsIngestionStandIn(base / "tls", authority, records_file=base / "log-analytics.jsonl")

    sim.start()
    try:
        if standin is not None:
            standin.start()
        config = _config(base, sim.url, standin, scenario.name)
        return _play(config, sim, standin, base, out)
    finally:
        if standin is not None:
            standin.stop()
        sim.stop()


# The policy a scenario runs with: its hook prints one line and succeeds, then the agent approves.
HOOK = ("import os; print('demo hook: ready for', os.environ['SE_EVENT_TYPE'], "
        "os.environ['SE_EVENT_ID'], 'on', os.environ['SE_VM_NAME'])")
POLICIES = {"user-reboot-approved": {
    "hooks": {"prepare": {"command": [sys.executable, "-c", HOOK], "timeout": 30}},
    "rules": [{"name": "prepare, then approve", "affects_this_vm": True,
               "event_statuses": ["Scheduled"], "pre_hooks": ["prepare"],
               "approve": "after-hooks"}]}}


def _config(base: Path, imds_url: str, standin, scenario: str = "") -> Config:
    if scenario in POLICIES:  # show what the agent does (hooks, approval) as well as the records
        logging.getLogger(logs.LOGGER_NAME + ".actions").setLevel(logging.INFO)
    data: dict = {
        "agent": {"state_dir": str(base / "state"), "poll_interval": 0.5, "heartbeat_interval": 15,
                  "log_format": "text", "log_level": "warning", "stop_flush_seconds": 10,
                  "tags": ["service", "env", "team"]},  # the report's Services section
        "imds": {"endpoint": imds_url, "first_call_timeout": 10},
        "sinks": {"file": {"path": str(base / "records.jsonl"),
                           "heartbeat_path": str(base / "heartbeats.jsonl")}},
        "policy": POLICIES.get(scenario, {}),
    }
    if standin is not None:
        # The managed identity asks the simulator for its tokens instead of 169.254.169.254.
        data["identity"] = {"token_endpoint": imds_url}
        data["sinks"]["log_analytics"] = {"endpoint": standin.endpoint, "dcr_immutable_id": standin.dcr_id,
                                          "ca_file": str(standin.ca_cert)}
    return Config.model_validate(data)


def _play(config: Config, sim, standin, base: Path, out: TextIO) -> int:
    from se_forwarder.agent import Agent
    from se_forwarder.sinks import registry

    speed = sim.speed
    t0 = time.time()
    # Problems the agent logs (a scripted 503...) carry the timeline's own relative time.
    logs.setup("text", "warning", stamp=lambda created: f"{created - t0:>5.1f}s", hide=("at",))
    end = sim.scenario.end
    print(f"se-forwarder demo: scenario '{sim.scenario.name}' at {speed:g}x "
          f"(1 s here = {_dur(speed)} of Azure time; about {_dur(end / speed)} in all), "
          f"VM {sim.scenario.vm.name}", file=out)
    print(f"IMDS simulator {sim.url}" + (f" · Log Analytics stand-in {standin.endpoint}" if standin else ""),
          file=out)
    print(file=out)
    print(f"{'time':>6}  {'EventId':<8} {'VM':<10} {'EventType':<9} {'Source':<8} {'Phase':<9}  "
          "details", file=out)
    print("-" * 96, file=out)
    last_line = [time.time()]

    def timeline(records) -> None:
        for r in records:
            print(f"{time.time() - t0:>5.1f}s  {r.EventId[:8]:<8} {(r.VmName or '-')[:10]:<10} "
                  f"{r.EventType:<9} {(r.EventSource or '-'):<8} {r.Phase:<9}  {_details(r, speed)}",
                  file=out, flush=True)
        last_line[0] = time.time()

    stop = threading.Event()
    agent = Agent(config, registry.build(config), stop=stop, on_records=timeline)
    thread = threading.Thread(target=agent.run, name="agent", daemon=True)
    thread.start()
    try:
        while not sim.wait_until_finished(timeout=1.0):
            if time.time() - last_line[0] >= PROGRESS_EVERY:  # quiet stretch: say where it is
                print(f"{time.time() - t0:>5.1f}s  … scenario at {_dur(sim.scenario_time())} of "
                      f"{_dur(end)}", file=out, flush=True)
                last_line[0] = time.time()
            if time.time() - t0 > end / speed + 600:
                break
        time.sleep(2.5 * config.agent.poll_interval)  # let the agent see the final document
    except KeyboardInterrupt:
        return _interrupted(stop, thread, base, out)
    stop.set()
    thread.join(30)
    print("-" * 96, file=out)
    _summary(base, standin, speed, out)
    _report(base, out)
    return 0


def _interrupted(stop: threading.Event, agent: threading.Thread, base: Path, out: TextIO) -> int:
    """Ctrl-C: stop the agent as a service stop would (it delivers what it can, writes its last
    heartbeat and a stopped status), say so, and exit 130; no summary or report."""
    print(f"\ninterrupted: stopping the agent (its state stays in {base / 'state'}; Ctrl-C again "
          "to leave at once)", file=out, flush=True)
    stop.set()
    agent.join(30)
    if agent.is_alive():
        print("the agent did not stop within 30 s", file=out, flush=True)
        return 1
    print(f"stopped cleanly: `se-forwarder status --state-dir {base / 'state'}` says STOPPED",
          file=out, flush=True)
    return 130


def _report(base: Path, out: TextIO) -> None:
    """The fleet view of what the demo delivered (``se-forwarder report`` on its directory)."""
    try:
        from se_forwarder.report import build, sources

        built = build.build(sources.read_paths([base]), build.dashboards_dir())
    except ImportError as exc:  # the report extra is not installed
        print(f"(fleet view report skipped: {exc}; pip install se-forwarder[report])", file=out)
        return
    except (sources.SourceError, build.DashboardsMissing) as exc:
        print(f"(fleet view report skipped: {exc})", file=out)
        return
    path = base / "fleet-report.html"
    path.write_text(built.html, "utf-8")
    print(f"Fleet view report: {path} (open it in a browser; `se-forwarder report {base}` "
          "writes it again)", file=out)


def _details(r, speed: float) -> str:
    parts = []
    if r.Phase in ("FirstSeen", "Updated") and r.NoticeSeconds is not None:
        parts.append(f"notice {_dur(r.NoticeSeconds * speed)}")
    if r.Phase == "Started":
        parts.append("no notice (appeared Started)" if r.StartDelaySeconds is None and r.SinceFirstSeenSeconds == 0
                     else f"start delay {_dur(r.StartDelaySeconds * speed, signed=True)}"
                     if r.StartDelaySeconds is not None else "started")
    if r.Phase == "Removed":
        parts.append(r.Outcome or "")
        if r.SinceStartedSeconds is not None:
            parts.append(f"impact window {_dur(r.SinceStartedSeconds * speed)}")
    parts.append("this VM" if r.AffectsThisVm else "other VMs: " + ",".join(r.Resources))
    return " · ".join(p for p in parts if p)


def _dur(seconds: float, signed: bool = False) -> str:
    sign = "-" if seconds < 0 else ("+" if signed else "")
    s = abs(round(seconds))
    return f"{sign}{s // 60}m{s % 60:02d}s" if s >= 60 else f"{sign}{s}s"


def _summary(base: Path, standin, speed: float, out: TextIO) -> None:
    import json
    if standin is not None:
        rows = standin.records(contract.table(contract.RECORDS).stream)
        heartbeats = standin.records(contract.table(contract.HEARTBEATS).stream)
        source = "read back from the Log Analytics stand-in (ScheduledEvents_CL)"
    else:
        path = base / "records.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        heartbeats = []
        source = f"read back from {path}"
    unique = list({r["RecordId"]: r for r in rows}.values())  # at-least-once: dedupe on RecordId
    print(f"Summary, {source}: {len(unique)} records "
          f"({len(rows) - len(unique)} duplicates dropped), {len(heartbeats)} heartbeats", file=out)
    by = Counter((r["EventType"], r["Phase"]) for r in unique)
    phases = ["FirstSeen", "Updated", "Started", "Removed", "Approved"]
    types = sorted({t for t, _ in by})
    print(f"\n  {'EventType':<10}" + "".join(f"{p:>10}" for p in phases), file=out)
    for t in types:
        print(f"  {t:<10}" + "".join(f"{by.get((t, p), 0):>10}" for p in phases), file=out)
    print("\n  Events (timings at scenario speed):", file=out)
    events: dict[str, dict] = {}
    for r in unique:
        e = events.setdefault(r["EventId"], {"type": r["EventType"], "affects": r["AffectsThisVm"]})
        if r["Phase"] == "FirstSeen":
            e["notice"] = r["NoticeSeconds"]
        elif r["Phase"] == "Started":
            e["delay"] = r["StartDelaySeconds"]
        elif r["Phase"] == "Removed":
            e["outcome"] = r["Outcome"]
            e["window"] = r["SinceStartedSeconds"]
    for eid, e in events.items():
        fmt = lambda v, signed=False: "-" if v is None else _dur(v * speed, signed)
        print(f"  {eid[:8]}  {e['type']:<9} {'this VM' if e['affects'] else 'others ':<8} "
              f"notice {fmt(e.get('notice')):>7}  start delay {fmt(e.get('delay'), True):>7}  "
              f"impact window {fmt(e.get('window')):>7}  {e.get('outcome') or 'open'}", file=out)
    print(f"\nRecords: {base / 'records.jsonl'} (JSON Lines, one record per line)", file=out)
    if standin is not None:
        print(f"Log Analytics stand-in copy: {base / 'log-analytics.jsonl'}", file=out)
    print(f"Agent state and outbox: {base / 'state'}", file=out)
