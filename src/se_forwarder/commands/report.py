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
from typing import Any, TextIO

from ..clock import SYSTEM
from ..errors import ReportError
from .args import positive_int

# What `pip install se-forwarder[report]` brings (pyproject.toml), by import name.
REPORT_EXTRA = ("duckdb_kql", "matplotlib", "jinja2", "markdown_it")

HELP_SOURCES = (
    "rows to report on: the Logs Ingestion stand-in's log-analytics.jsonl, the file "
    "sink's records.jsonl / heartbeats.jsonl, the collector's platform.jsonl (Azure's "
    "own record, beside the agents'), or a directory holding them (what "
    "`se-forwarder demo` writes)"
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sources", nargs="*", type=Path, metavar="SOURCE", help=HELP_SOURCES)
    parser.add_argument(
        "--fleet",
        type=positive_int,
        metavar="N",
        help="report on a generated fleet of N VMs instead (needs the test bed: "
        "se-forwarder-testbed: pip install ./testbed)",
    )
    parser.add_argument(
        "--days",
        type=positive_int,
        default=8,
        help="days of data of the generated fleet (default 8)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("fleet-report.html"),
        help="the HTML file to write (default ./fleet-report.html)",
    )
    parser.add_argument(
        "--now",
        type=_moment,
        metavar="TIME",
        help="evaluation moment, ISO 8601 UTC (default: the newest row)",
    )
    parser.add_argument(
        "--arg-file",
        type=Path,
        metavar="JSON",
        help="Azure Resource Graph rows as `az graph query -o json` prints them "
        "(scheduled events: compared with the agents' records; VMs and "
        "scale-set instances: the agentless VMs), one query's output or "
        "several's rows in one list",
    )
    parser.add_argument(
        "--dashboards",
        type=Path,
        metavar="DIR",
        help="the repository's dashboards/ folder (default: the checkout this "
        "package runs from, or $SE_FORWARDER_DASHBOARDS)",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress on stderr while the report builds"
    )


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
        print(
            f"se-forwarder report: needs the report extra (missing: {', '.join(missing)}): "
            "pip install 'se-forwarder[report]'",
            file=sys.stderr,
        )
        return 1
    from ..report import build, sources
    from ..report.workbooks import argrows

    progress = None if args.quiet else Progress(sys.stderr)
    try:
        dashboards = build.dashboards_dir(args.dashboards)
        arg = argrows.read(args.arg_file) if args.arg_file else None
        if progress and args.fleet:
            progress(f"generating a fleet of {args.fleet:,} VMs over {args.days} days")
        rows = (
            sources.generated(args.fleet, args.days)
            if args.fleet
            else sources.read_paths(args.sources)
        )
        try:
            built = build.build(rows, dashboards, now=args.now, arg=arg, progress=progress)
        finally:
            rows.close()
    except ReportError as exc:
        if progress:
            progress.done()
        print(f"se-forwarder report: {exc}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(built.html, "utf-8")
    if progress:
        progress.done()
    _summary(args.out, built)
    return 0


def _summary(out: Path, built: Any) -> None:  # build.Built (the report extra)
    """What was written, what was skipped and why, what has no result."""
    from ..report.kql.load import MAX_TEXT

    failed, needs_arg = len(built.failed), len(built.needs_arg)
    skipped = sum(ld.skipped_total for ld in built.loads)
    print(
        f"Report: {out} (evaluated at {built.now:%Y-%m-%d %H:%M} UTC"
        + (f"; {skipped:,} malformed lines skipped" if skipped else "")
        + (f"; {failed} panels without result, marked in the page" if failed else "")
        + ")"
    )
    for ld in built.loads:
        if ld.skipped_total:
            # the multiplication sign, as printed for the reader
            reasons = "; ".join(f"{n:,} × {why}" for why, n in ld.skipped.most_common())  # noqa: RUF001
            print(f"  skipped in {ld.path}: {reasons}")
        if ld.cut:
            print(
                f"  {ld.path}: {ld.cut:,} value(s) longer than the agent sends cut to "
                f"{MAX_TEXT:,} characters"
            )
    if needs_arg:
        print(
            f"  {needs_arg} panels compare with Azure Resource Graph and were left out: "
            "pass --arg-file to include them"
        )


class Progress:
    """Progress on stderr: one line rewritten in place on a terminal, one line per stage else."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.tty = stream, stream.isatty()
        self.last, self.t0 = "", SYSTEM.monotonic()

    def __call__(self, stage: str, detail: str = "") -> None:
        if self.tty:
            line = (
                f"[{SYSTEM.monotonic() - self.t0:5.0f} s] {stage}{' ' + detail if detail else ''}"
            )
            self.stream.write("\r" + line[:110].ljust(110))
        elif stage != self.last:
            self.stream.write(f"[{SYSTEM.monotonic() - self.t0:5.0f} s] {stage}\n")
        self.last = stage
        self.stream.flush()

    def done(self) -> None:
        if self.tty and self.last:
            self.stream.write("\r" + " " * 110 + "\r")
            self.stream.flush()
