"""The demo's fleet view report (``se-forwarder report`` on its directory), built once: the page,
and the rows the terminal's summary prints, so the terminal and the report say the same."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from .azure_record import LiveTables

if TYPE_CHECKING:
    from se_forwarder.report.build import Built

    from .play import Play

#: the library queries the terminal's summary prints (per event and VM: the agents' outcome
#: beside Azure's end), run on the report's rows at the report's moment
OUTCOMES = "verified-outcomes.kql"


def build_report(play: Play, end_ms: int, out: TextIO) -> tuple[Built | None, Path | None]:
    """The report evaluated at the scenario's end (scenario time), with Resource Graph as the
    scenario ends (``resource-graph.json``); ``(None, None)`` when it cannot be built (said)."""
    base = play.base
    arg_file = None
    if isinstance(play.graph_tables, LiveTables):  # what the Resource Graph stand-in serves
        end = play.fleet.end  # as `az graph query -o json` prints it: events, then the VMs
        tables = play.graph_tables
        graph = tables.scheduled_events(end) + tables.vms_at(end)
        arg_file = base / "resource-graph.json"
        arg_file.write_text(json.dumps({"count": len(graph), "data": graph}, indent=1), "utf-8")
    try:
        from se_forwarder.report import build, sources
        from se_forwarder.report.workbooks import argrows
    except ImportError as exc:  # the report extra is not installed
        print(f"(fleet view report skipped: {exc}; pip install se-forwarder[report])", file=out)
        return None, None
    try:
        paths = (
            [base]
            if (base / sources.STANDIN_FILE).is_file()
            else sorted(p for p in (base / "vms").iterdir() if any(p.glob("*.jsonl")))
        )
        rows = sources.read_paths(paths)
        rows.label = (
            f"se-forwarder demo '{play.fleet.name}': every time is scenario time "
            f"({play.fleet.end / 60:g} minutes of maintenance played at "
            f"{play.fleet.speed:g}x), evaluated at the scenario's end"
        )
        built = build.build(
            rows,
            build.dashboards_dir(),
            now=datetime.fromtimestamp(end_ms / 1000, UTC).replace(tzinfo=None),
            arg=argrows.read(arg_file) if arg_file else None,
            library=(OUTCOMES,),
        )
    except (sources.SourceError, build.DashboardsMissing) as exc:
        print(f"(fleet view report skipped: {exc})", file=out)
        return None, None
    (base / "fleet-report.html").write_text(built.html, "utf-8")
    return built, arg_file


def report_line(play: Play, built: Built, arg_file: Path | None, out: TextIO) -> None:
    path = play.base / "fleet-report.html"
    again = f"se-forwarder report {play.base} --now {built.now.isoformat(timespec='milliseconds')}"
    again += f" --arg-file {arg_file}" if arg_file else ""
    print(
        f"Fleet view report: {path} (scenario time, evaluated at the scenario's end, "
        f"{built.now:%H:%M:%S} UTC, while the fleet still ran; `{again}` writes it again)",
        file=out,
    )
