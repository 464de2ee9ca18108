"""``se-forwarder drain``: wait until the running agent's spool is empty, or a deadline.

Before anything that loses the state directory (a scale-set reimage, deleting a VM, a
``--purge``), the records not yet delivered are only there. This waits until every sink's cursor
has caught up with the outbox (each sink's spool depth 0 in a ``status.json`` written after the
wait began), printing progress, so a script can go on safely, or stop. Like ``status`` it reads
``status.json`` and nothing else: it never opens the agent's SQLite files (as root it would leave
files the agent's dynamic user cannot open).

Exit status: 0 the spool is empty (every sink caught up); 1 records remain at the deadline, or
the agent is not running with records still in its spool (stopped, or gone for 10 s: a crashed
agent is given the time systemd takes to restart it); 2 bad usage, or no readable
``status.json`` in the state directory.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import health, oshost, redact, terminal
from ..clock import SYSTEM, Clock
from ..errors import StatusFileError
from ..health import Snapshot
from ._config import config_arg, state_dir_or_report
from .args import directory, non_negative_float, positive_float
from .status import load

# An agent found dead (not stopped cleanly) may be restarting: systemd starts it again after
# RestartSec=5s, and its first status.json follows within a second or two.
RESTART_GRACE = 10.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Wait until the agent's spool is empty (every sink delivered what it "
        "holds), or the deadline: exit 0 drained, 1 not drained, 2 unreadable."
    )
    parser.add_argument(
        "--timeout",
        type=non_negative_float,
        default=300.0,
        metavar="SECONDS",
        help="give up after this long (default %(default)s)",
    )
    parser.add_argument(
        "--interval",
        type=positive_float,
        default=5.0,
        metavar="SECONDS",
        help="print progress this often (default %(default)s)",
    )
    parser.add_argument(
        "--state-dir",
        type=directory,
        default=None,
        help="state directory holding status.json (default: agent.state_dir of the config)",
    )
    config_arg(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object at the end (progress goes to stderr)",
    )


@dataclass(frozen=True)
class Reading:
    """One look at status.json: the spool per sink, and whether it can still change."""

    depths: dict[str, int]
    errors: dict[str, str]
    fresh: bool  # written after the wait began (or at the agent's final stop)
    running: bool
    stopped: bool

    @property
    def total(self) -> int:
        return sum(self.depths.values())


def read(state_dir: Path, since: float) -> Reading | None:
    """The agent's spool as status.json tells it; None when there is no status.json."""
    data = load(state_dir / health.STATUS_FILE)
    if data is None:
        return None
    snap, _ = health.read(redact.data(data, by_key=False))
    # unknown (None) counts as alive: only a process known to be gone cannot drain
    alive = snap.pid is not None and oshost.current().process_alive(snap.pid) is not False
    depths = {name: s.spool_depth for name, s in snap.sinks.items()}
    if not depths:  # an older agent: only the deepest sink's backlog
        depths = {"spool": snap.spool_depth}
    errors = {name: s.last_error for name, s in snap.sinks.items() if s.last_error}
    return Reading(depths, errors, _fresh(snap, since), alive and not snap.stopped, snap.stopped)


def _fresh(snap: Snapshot, since: float) -> bool:
    return snap.stopped or (snap.written_at is not None and snap.written_at >= since)


def run(args: argparse.Namespace, clock: Clock = SYSTEM) -> int:
    """``clock``: the waits (the restart grace, the deadline) run on it; a test's fake clock
    plays them without the real seconds."""
    state_dir = state_dir_or_report(args)
    if state_dir is None:
        return 2
    out = sys.stderr if args.json else sys.stdout
    since, start = clock.wall_ms() / 1000, clock.monotonic()
    last_total, last_print, dead_since = None, -args.interval, None
    while True:
        try:
            r = read(state_dir, since)
        except StatusFileError as exc:
            return _finish(args, 2, f"cannot read the agent's status: {exc}", None, start, clock)
        if r is None:
            return _finish(
                args,
                2,
                f"no {health.STATUS_FILE} in {state_dir}: is the agent "
                "installed here (--state-dir)?",
                None,
                start,
                clock,
            )
        elapsed = clock.monotonic() - start
        if r.fresh and r.total == 0:
            return _finish(
                args, 0, "spool empty: every sink delivered what it held", r, start, clock
            )
        if r.running or r.stopped:
            dead_since = None
        elif dead_since is None:
            dead_since = elapsed
        if r.stopped or (dead_since is not None and elapsed - dead_since >= RESTART_GRACE):
            state = "stopped" if r.stopped else "not running"
            return _finish(
                args,
                1,
                f"the agent is {state}: {r.total} record(s) wait in its spool for its next start",
                r,
                start,
                clock,
            )
        if elapsed >= args.timeout:
            return _finish(
                args,
                1,
                f"not drained within {args.timeout:g}s: {r.total} record(s) still in the spool",
                r,
                start,
                clock,
            )
        if elapsed - last_print >= args.interval or last_total is None:
            print(
                f"se-forwarder drain: {_describe(r)}; {max(args.timeout - elapsed, 0):.0f}s left",
                file=out,
                flush=True,
            )
            last_total, last_print = r.total, elapsed
        clock.sleep(min(1.0, max(args.timeout - elapsed, 0.05)))


def _describe(r: Reading) -> str:
    sinks = ", ".join(f"{name} {depth}" for name, depth in sorted(r.depths.items()))
    text = f"{r.total} record(s) in the spool ({sinks})"
    if r.errors:
        text += "; " + "; ".join(f"{name}: {err}" for name, err in sorted(r.errors.items()))
    return terminal.safe(text)  # a sink's error quotes what its peer answered


def _finish(
    args: argparse.Namespace, code: int, message: str, r: Reading | None, start: float, clock: Clock
) -> int:
    waited = round(clock.monotonic() - start, 1)
    if args.json:
        doc: dict[str, Any] = {
            "drained": code == 0,
            "message": message,
            "waited_seconds": waited,
            "spool_depth": None if r is None else r.total,
            "sinks": None if r is None else r.depths,
        }
        print(json.dumps(doc, sort_keys=True))
    else:
        detail = f" ({_describe(r)})" if r is not None and r.total else ""
        print(
            f"se-forwarder drain: {message}{detail} after {waited:g}s",
            file=sys.stdout if code == 0 else sys.stderr,
        )
    return code
