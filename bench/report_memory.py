#!/usr/bin/env python3
"""The report's loader against file size: peak memory and time to load a heartbeats file of
several sizes into the engine, beside the loader before the streaming one (BASELINE_REF) in the
same run. Printed, not asserted: the figure that matters is that peak memory stays flat while
the file grows (issue 18: a 2.6 GB file took 16 GB).

    .venv/bin/python bench/report_memory.py                    # 0.5, 1, 2 and 4 GB
    .venv/bin/python bench/report_memory.py --sizes 1,8        # GB
    .venv/bin/python bench/report_memory.py --quick            # 10 and 20 MB (smoke test)

The file is synthesized (a heartbeat of the contract's shape per line, 10,000 VMs every 5
minutes backwards from the end: about 900 bytes a line), each load runs in a process of its own
sampled from outside (bench/support/peak.py), and the baseline is stopped at --baseline-limit-gb.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report_speed import BASELINE_REF, baseline_tree
from support import peak

REPO = Path(__file__).resolve().parents[1]
END = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
VMS = 10_000

#: the new loader: the engine reads the file itself
NEW = """
import sys
from pathlib import Path
from se_forwarder.report import Engine
e = Engine(files=[Path(sys.argv[1])], now=sys.argv[2])
print(e.counts["ScheduledEventsAgent_CL"])
"""
#: the old one: every line into a Python dict, then the engine (its API before the change)
OLD = """
import sys
from pathlib import Path
from se_forwarder.report import Engine, sources
rows = sources.read_paths([Path(sys.argv[1])])
e = Engine(rows.records, rows.heartbeats, now=sys.argv[2])
print(e.counts["ScheduledEventsAgent_CL"])
"""


def heartbeat(i: int) -> str:
    vm = i % VMS
    at = END - timedelta(minutes=5 * (i // VMS))
    row = {
        "TimeGenerated": at.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "RecordId": str(uuid.UUID(int=i)),
        "Reason": "periodic",
        "Computer": f"vm-{vm}",
        "VmName": f"vm-{vm}",
        "VmId": str(uuid.UUID(int=vm + 1 << 64)),
        "VmResourceId": f"/subscriptions/6d0c1a9e-3f1b-4b6a-9c37-2a5e8f0d4b11/resourceGroups/"
        f"rg-{vm // 100}/providers/Microsoft.Compute/virtualMachines/vm-{vm}",
        "SubscriptionId": "6d0c1a9e-3f1b-4b6a-9c37-2a5e8f0d4b11",
        "ResourceGroup": f"rg-{vm // 100}",
        "Location": "westeurope",
        "Zone": str(1 + vm % 3),
        "ScaleSetName": None,
        "FaultDomain": vm % 3,
        "UpdateDomain": vm % 5,
        "AgentVersion": "0.1.0",
        "UptimeSeconds": 300.0 * (i // VMS),
        "Polls": 300 * (i // VMS),
        "PollErrors": 0,
        "LastPollLatencyMs": 3.1,
        "LastIncarnation": None,
        "OpenEvents": 0,
        "SpoolDepth": 0,
        "DeliveredRecords": 0,
        "FailedDeliveries": 0,
        "DroppedRecords": 0,
        "DeadLetteredRecords": 0,
        "OpenEventList": [],
        "MalformedEvents": 0,
        "TruncatedValues": 0,
        "PersistFailures": 0,
        "HooksRunning": 0,
        "HooksSucceeded": 0,
        "HooksFailed": 0,
        "ApprovalsSent": 0,
        "ApprovalsFailed": 0,
        "DryRunDecisions": 0,
        "_IngestionTime": (at + timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
    }
    return json.dumps(row, separators=(",", ":")) + "\n"


def write(path: Path, size: int) -> int:
    """Heartbeats until the file holds ``size`` bytes; how many lines."""
    written = lines = 0
    with path.open("w", encoding="utf-8") as f:
        while written < size:
            line = heartbeat(lines)
            f.write(line)
            written += len(line)
            lines += 1
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="0.5,1,2,4", help="file sizes in GB (default 0.5,1,2,4)")
    ap.add_argument("--quick", action="store_true", help="10 and 20 MB")
    ap.add_argument("--no-baseline", action="store_true", help=f"skip the {BASELINE_REF} loader")
    ap.add_argument("--baseline-limit-gb", type=float, default=8.0)
    args = ap.parse_args(argv)
    if not args.quick:  # measured cold: no translation read from disk; a smoke test (--quick)
        os.environ.pop("SE_FORWARDER_KQL_CACHE", None)  # checks the script, not its figures
    sizes = [0.01, 0.02] if args.quick else [float(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="se-report-memory-") as tmp:
        work = Path(tmp)
        tree = None if args.no_baseline else baseline_tree(work)
        print(
            f"{'file GB':>8} {'lines':>12} {'loader':<18} {'wall s':>8} {'CPU s':>8} "
            f"{'peak RSS MB':>12} {'temp MB':>9}"
        )
        for gb in sizes:
            path = work / "heartbeats.jsonl"
            lines = write(path, int(gb * 1e9))
            runs = [("this tree", REPO / "src", NEW, None)]
            if tree is not None:
                runs.append((f"before ({BASELINE_REF})", tree / "src", OLD, args.baseline_limit_gb))
            for name, src, driver, limit in runs:
                got = peak.run(
                    [sys.executable, "-c", driver, str(path), END.isoformat()],
                    work / "scratch",
                    env={"PYTHONPATH": str(src)},
                    limit_mb=None if limit is None else limit * 1024,
                )
                state = (
                    ""
                    if got.returncode == 0
                    else (
                        " stopped at the memory limit" if got.killed else f" exit {got.returncode}"
                    )
                )
                loaded = got.stdout.strip().splitlines()[-1:] == [str(lines)] or bool(state)
                print(
                    f"{path.stat().st_size / 1e9:8.2f} {lines:12,} {name:<18} {got.seconds:8.1f} "
                    f"{got.cpu_seconds:8.1f} {got.rss_mb:12,.0f} {got.temp_bytes / 1e6:9,.0f}"
                    + state
                    + ("" if loaded else " (rows lost!)")
                )
            path.unlink()


if __name__ == "__main__":
    main()
