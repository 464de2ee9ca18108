"""``se-forwarder report``: the fleet view (the two workbooks) as one self-contained HTML file,
from local rows, by executing the workbooks' own queries (``se_forwarder.report``).

Needs the ``report`` extra (duckdb-kql, matplotlib); imported only when this command runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from datetime import datetime
from pathlib import Path

from ..errors import ReportError
from .args import positive_int

# What `pip install se-forwarder[report]` brings (pyproject.toml), by import name.
REPORT_EXTRA = ("duckdb_kql", "matplotlib")

HELP_SOURCES = ("rows to report on: the Logs Ingestion stand-in's log-analytics.jsonl, the file "
                "sink's records.jsonl / heartbeats.jsonl, or a directory holding them (what "
                "`se-forwarder demo` writes)")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sources", nargs="*", type=Path, metavar="SOURCE", help=HELP_SOURCES)
    parser.add_argument("--fleet", type=positive_int, metavar="N",
                        help="report on a generated fleet of N VMs instead (needs the test bed: "
                             "pip install se-forwarder[standins])")
    parser.add_argument("--days", type=positive_int, default=8,
                        help="days of data of the generated fleet (default 8)")
    parser.add_argument("--out", type=Path, default=Path("fleet-report.html"),
                        help="the HTML file to write (default ./fleet-report.html)")
    parser.add_argument("--now", type=_moment, metavar="TIME",
                        help="evaluation moment, ISO 8601 UTC (default: the newest row)")
    parser.add_argument("--arg-file", type=Path, metavar="JSON",
                        help="Azure Resource Graph rows of maintenanceresources, as `az graph "
                             "query -o json` prints them: compared with the agents' records")
    parser.add_argument("--dashboards", type=Path, metavar="DIR",
                        help="the repository's dashboards/ folder (default: the checkout this "
                             "package runs from, or $SE_FORWARDER_DASHBOARDS)")


def _moment(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None


def run(args: argparse.Namespace) -> int:
    if bool(args.sources) == bool(args.fleet):
        print("se-forwarder report: give SOURCE files or --fleet N (one of them)", file=sys.stderr)
        return 2
    missing = [name for name in REPORT_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        print(f"se-forwarder report: needs the report extra (missing: {', '.join(missing)}): "
              "pip install 'se-forwarder[report]'", file=sys.stderr)
        return 1
    from ..report import argrows, build, sources

    try:
        dashboards = build.dashboards_dir(args.dashboards)
        rows = sources.generated(args.fleet, args.days) if args.fleet \
            else sources.read_paths(args.sources)
        arg = argrows.read(args.arg_file) if args.arg_file else None
    except ReportError as exc:
        print(f"se-forwarder report: {exc}", file=sys.stderr)
        return 2
    built = build.build(rows, dashboards, now=args.now, arg=arg)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(built.html, "utf-8")
    failed = sum(1 for res in built.results.values() for r in res.values() if r.error)
    skipped = sum(rows.skipped.values())
    print(f"Report: {args.out} (evaluated at {built.now:%Y-%m-%d %H:%M} UTC"
          + (f"; {skipped:,} malformed lines skipped" if skipped else "")
          + (f"; {failed} queries without result, marked in the page" if failed else "") + ")")
    return 0
