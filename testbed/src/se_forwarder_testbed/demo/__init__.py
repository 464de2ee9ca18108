"""``se-forwarder demo``: the whole pipeline on this machine, no Azure account, no network.

A fleet of simulated VMs in two services (``fleets/fleet.toml``; ``--scenario`` also plays any
single-VM scenario as a fleet of one): each VM with the agent has its own IMDS simulator and its
own real agent, delivering through the real Logs Ingestion SDK into the local Log Analytics
stand-in (and a JSON Lines file per VM); a VM without the agent is known only from Azure's own
record, which the real collector (``collect --resource-graph``) reads from the Resource Graph
stand-in. Spot evictions, a scale-in deletion, a reboot with a network cut happen to the VMs as
the fleet file says.

Time: everything runs on one clock, ``speed`` times faster than the real one, that starts at the
current minute (``scaledclock``): the terminal, the records, Log Analytics' ingestion times and
the report all say scenario time, labelled so. The summary is read back from the stand-in, as a
user would query Log Analytics, and the report is evaluated at the scenario's end, before the
demo stops its agents (a fleet still running, as it would be in Azure).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from se_forwarder import logs
from se_forwarder.commands.args import directory, positive_float
from se_forwarder.errors import SeForwarderError

MARKER = ".se-forwarder-demo"

#: the command's one line in ``se-forwarder --help`` (registered under ``se_forwarder.commands``)
HELP = "the whole pipeline on this machine, no Azure account"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenario",
        default="fleet",
        help="built-in fleet or scenario name, or a file (default: fleet)",
    )
    parser.add_argument("--speed", type=positive_float, help="override the scenario's speed-up")
    parser.add_argument(
        "--dir",
        type=directory,
        default=Path("demo-output"),
        help="where state and records go (default: ./demo-output)",
    )
    parser.add_argument(
        "--kubernetes",
        action="store_true",
        help="an AKS node pool instead: a Reboot drains two nodes one at a time "
        "(docs/kubernetes.md)",
    )
    parser.add_argument(
        "--no-log-analytics",
        action="store_true",
        help="file sinks only (no Logs Ingestion stand-in, no collector)",
    )


def run(args: argparse.Namespace) -> int:
    from . import fleet as fleets

    out = sys.stdout
    try:
        fleet = fleets.load(args.scenario)
    except SeForwarderError as exc:
        print(f"se-forwarder demo: {exc}", file=sys.stderr)
        return 2
    if args.speed:
        fleet = fleet.model_copy(update={"speed": args.speed})
    base = Path(args.dir).resolve()
    if base.exists() and any(base.iterdir()) and not (base / MARKER).exists():
        print(
            f"se-forwarder demo: {base} exists and is not a demo directory; refusing to empty it "
            "(choose another --dir)",
            file=sys.stderr,
        )
        return 2
    shutil.rmtree(base, ignore_errors=True)  # only ever a previous demo's output
    base.mkdir(parents=True)
    (base / MARKER).write_text("made by se-forwarder demo; emptied by the next run\n")
    if args.kubernetes:
        from .kube import run_pool

        return run_pool(base, out, args.speed or 10.0)
    return _run(fleet, base, not args.no_log_analytics, out)


def _run(fleet: Any, base: Path, azure: bool, out: TextIO) -> int:
    from ..scaledclock import ScaledClock
    from ..standins.tokens import TokenAuthority
    from .play import Play

    clock = ScaledClock(fleet.speed, start_ms=int(time.time() // 60 * 60_000))
    # Problems the agents log (a scripted 503...) carry the timeline's scenario time.
    logs.setup(
        "text",
        "warning",
        hide=("at",),
        stamp=lambda created: time.strftime(
            "%H:%M:%S", time.gmtime(clock.wall_seconds() - (time.time() - created) * clock.speed)
        ),
    )
    authority = TokenAuthority()
    standin = graph = None
    if azure:
        standin, graph = _standins(base, authority, clock, out)
    play = Play(fleet, base, out, clock, authority, standin, graph)
    if graph is not None:
        from .azure_record import LiveTables

        graph.tables = play.graph_tables = LiveTables(
            fleet, play.scenario_time, play.wall_ms, play.approvals
        )
    try:
        play.start()
        _header(play, standin, graph, out)
        try:
            play.run()
        except KeyboardInterrupt:
            return _interrupted(play, base, out)
        end_ms = play.wall_ms(fleet.end)
        stopped = play.stop()
        print(RULE_LINE, file=out)
        if not stopped:
            print("(an agent did not stop within 30 s)", file=out)
        from .fleet_report import build_report, report_line
        from .summary import summary

        built, arg_file = build_report(play, end_ms, out)
        summary(play, standin, built, out)
        if built is not None:
            report_line(play, built, arg_file, out)
        return 0
    finally:
        play.stop(5)
        play.close()
        for s in (standin, graph):
            if s is not None:
                s.stop()


RULE_LINE = "-" * 104


def _standins(base: Path, authority: Any, clock: Any, out: TextIO) -> tuple[Any, Any]:
    """The Log Analytics stand-in (the sinks' side), and the Resource Graph stand-in the
    collector reads; each only when its SDK is installed (else said, and left out)."""
    try:
        import azure.monitor.ingestion  # the sink needs it

        from ..standins.logs_ingestion import LogsIngestionStandIn
    except ImportError as exc:
        print(f"(Log Analytics stand-in unavailable: {exc}; file sinks only)", file=out)
        return None, None
    standin = LogsIngestionStandIn(
        base / "tls", authority, records_file=base / "log-analytics.jsonl", ingestion_clock=clock
    ).start()
    try:
        import azure.mgmt.resourcegraph  # noqa: F401 - the collector needs it

        from ..standins.resource_graph import ResourceGraphStandIn
        from ..standins.tls import generate
    except ImportError as exc:
        print(
            f"(no collector: {exc}; pip install se-forwarder[collector]. A VM without the agent "
            "is then not seen)",
            file=out,
        )
        return standin, None
    graph = ResourceGraphStandIn(generate(base / "tls-resource-graph"), authority, quota=1000)
    return standin, graph.start()


def _header(play: Any, standin: Any, graph: Any, out: TextIO) -> None:
    from .play import COLUMNS, dur

    fleet = play.fleet
    agents = sum(vm.agent for vm in fleet.vms)
    services = fleet.services
    print(
        f"se-forwarder demo: '{fleet.name}': {len(fleet.vms)} VM{'s' * (len(fleet.vms) > 1)}"
        + (f" in {len(services)} services ({', '.join(services)})" if services else "")
        + (f", {len(fleet.vms) - agents} without the agent" if agents < len(fleet.vms) else ""),
        file=out,
    )
    print(
        f"Scenario time: {dur(fleet.end)} of maintenance from "
        f"{play.clock_text(play.origin_ms / 1000)} UTC, played "
        f"at {fleet.speed:g}x (about {dur(fleet.end / fleet.speed)} here). Every time shown "
        "here, in the records and in the report is scenario time.",
        file=out,
    )
    places = [f"{len(play.machines)} IMDS simulators"]
    if standin is not None:
        places.append(f"Log Analytics stand-in {standin.endpoint}")
    if graph is not None:
        places.append(f"Resource Graph stand-in {graph.endpoint} (read by the collector)")
    print(" · ".join(places), file=out)
    print(file=out)
    print(COLUMNS.replace("time    ", "time UTC"), file=out)
    print(RULE_LINE, file=out, flush=True)


def _interrupted(play: Any, base: Path, out: TextIO) -> int:
    """Ctrl-C: stop the agents as a service stop would (they deliver what they can, write their
    last heartbeat and a stopped status), say so, and exit 130; no summary or report."""
    print(
        f"\ninterrupted: stopping the agents (their state stays in {base / 'vms'}; Ctrl-C again "
        "to leave at once)",
        file=out,
        flush=True,
    )
    if not play.stop():
        print("an agent did not stop within 30 s", file=out, flush=True)
        return 1
    print(
        f"stopped cleanly: `se-forwarder status --state-dir {base / 'vms' / '<vm>' / 'state'}` "
        "says STOPPED",
        file=out,
        flush=True,
    )
    return 130
