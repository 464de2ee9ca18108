"""The fleet view of ``se-forwarder demo --kubernetes``: the report (``se-forwarder report``) on
what the nodes' agents delivered to their file sinks, evaluated at the scenario's end, and the
lines of its Services section, where the node pool is one service (``node pool: <subscription>/
<cluster>/<pool>``, dashboards/definitions/fleet-vms.kql)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

#: the report's table that lists every service a maintenance touched (the others list what is
#: upcoming or at risk: nothing, once the pool's reboots are over)
IMPACT = "services-impact-by-month"


def report(base: Path, files: list[Path], now_ms: int, out: TextIO) -> list[dict[str, Any]]:
    """Write ``base/fleet-report.html``; print and return the Services impact rows (none when
    the report extra is missing or nothing was delivered: said in one line)."""
    try:
        from se_forwarder.report import build, sources
    except ImportError as exc:  # the report extra is not installed
        print(f"(fleet view report skipped: {exc}; pip install se-forwarder[report])", file=out)
        return []
    rows = sources.Rows(
        [f for f in files if f.is_file()],
        label="se-forwarder demo --kubernetes: every time is scenario time, evaluated at the "
        "scenario's end",
    )
    now = datetime.fromtimestamp(now_ms / 1000, UTC).replace(tzinfo=None)
    try:
        built = build.build(rows, build.dashboards_dir(), now=now)
    except (sources.SourceError, build.DashboardsMissing) as exc:
        print(f"(fleet view report skipped: {exc})", file=out)
        return []
    path = base / "fleet-report.html"
    path.write_text(built.html, "utf-8")
    services = built.results["scheduled-events"][IMPACT].rows
    print("\nthe fleet view's Services (impact by service and month):", file=out)
    for r in services:
        print(
            f"  {r['Service']}  {r['Month']}: {r['VMs']} VMs, {r['Events']} events "
            f"({r['Reboot']} Reboot), {r['ApprovedEarly']} approved early, impact window "
            f"{r['ImpactWindowMinutes']:g} VM-minutes",
            file=out,
        )
    print(f"Fleet view report: {path} (scenario time, evaluated at {now:%H:%M:%S} UTC)", file=out)
    return services
