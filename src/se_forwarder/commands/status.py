"""``se-forwarder status``: is the agent healthy? For people, probes and installers.

Reads ``<state_dir>/status.json`` (written atomically by the running agent every few seconds and
at a clean stop) and ``dead-letter.jsonl``, so it works as any user that can read the state
directory and never touches the agent's SQLite files. The rules are ``se_forwarder.health``'s.
Dead letters nobody acknowledged fail it (``DEAD LETTERS``): ``--ack-dead-letters`` records
that a person has read them (``delivery.dead_letters``).

Exit status: 0 healthy; 1 unhealthy; 2 bad usage or an unreadable/corrupt status file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .. import health, oshost, redact, terminal
from ..clock import SYSTEM
from ..delivery.dead_letters import Backlog, acknowledge, backlog
from ..errors import StatusFileError
from ..health import Assessment, Limits, Snapshot
from ..health.read import is_collector
from ..health.runtime_copy import freshest
from ..health.status_file import filesystem
from ._config import config_arg, state_dir_or_report
from .args import directory, non_negative_float, positive_float


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Show the agent's health from its state directory (exit 1 if "
        "unhealthy); the collector's, given the collector's state directory "
        "or configuration."
    )
    parser.add_argument(
        "--state-dir",
        type=directory,
        default=None,
        help="state directory holding status.json (default: agent.state_dir of the config, "
        "with SE_FORWARDER_AGENT__STATE_DIR and the other overrides; else "
        f"$SE_FORWARDER_STATE_DIR or {oshost.current().default_state_dir()})",
    )
    config_arg(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    for flag, default, text in (
        ("--stale-after", health.rules.STALE_AFTER, "when status.json is older than this"),
        (
            "--max-poll-age",
            health.rules.MAX_POLL_AGE,
            ("when the last poll attempt is older than this"),
        ),
        ("--max-failing", health.rules.MAX_FAILING, "when polls have failed for this long"),
    ):
        parser.add_argument(
            flag,
            type=positive_float,
            default=default,
            metavar="SECONDS",
            help=f"unhealthy {text} (default %(default)s)",
        )
    parser.add_argument(
        "--startup-grace",
        type=non_negative_float,
        default=health.rules.STARTUP_GRACE,
        metavar="SECONDS",
        help="report 'starting' rather than failed while no poll has completed yet within "
        "this long after start (default %(default)s; still exit 1)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="also fail on sink warnings (delivery errors, dropped records)",
    )
    parser.add_argument(
        "--ack-dead-letters",
        action="store_true",
        help="record that the dead letters now in dead-letter.jsonl were read (they fail status "
        "until then; later ones fail it again)",
    )


def load(path: Path) -> dict[str, Any] | None:
    """The parsed status file, None if it does not exist; StatusFileError if unusable."""
    for again in (True, False):  # on a full disk it is rewritten in place: a read may meet a write
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StatusFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
        try:
            data = json.loads(raw)
            break
        except (ValueError, UnicodeDecodeError) as exc:
            if not again:
                raise StatusFileError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise StatusFileError(f"{path} does not hold a JSON object")
    return data


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    if seconds < 0:
        return "in the future (clock skew?)"
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h ago"
    return f"{seconds / 86400:.1f}d ago"


def render_text(
    snap: Snapshot | None,
    verdict: Assessment,
    state_dir: Path,
    *,
    now: float | None = None,
    letters: Backlog | None = None,
) -> str:
    """``now``: epoch seconds (default: the system clock's); ``letters``: the dead letters."""
    head = f"se-forwarder: {verdict.state.upper()}"
    extras = []
    if snap is not None and snap.pid is not None:
        extras.append(f"pid {snap.pid}")
    if snap is not None and snap.version:
        extras.append(f"version {snap.version}")
    if verdict.ages.get("started_at") is not None:
        extras.append(f"started {_ago(verdict.ages['started_at'])}")
    lines = [
        head + (" (" + ", ".join(extras) + ")" if extras else ""),
        f"  state dir:    {state_dir}",
    ]
    lines += [f"  PROBLEM:      {p}" for p in verdict.problems]
    lines += [f"  warning:      {w}" for w in verdict.warnings]
    if snap is not None:
        lines += _details(snap, verdict, SYSTEM.wall_seconds() if now is None else now)
    if letters is not None and letters.records:
        lines.append(
            f"  dead letters: {letters.records}, "
            + ("all acknowledged" if not letters.pending else f"{letters.pending} not acknowledged")
            + f" ({state_dir / DEAD_LETTERS})"
        )
    return "\n".join(terminal.safe(line) for line in lines) + "\n"  # served text, shown


def _skew(skew: float | None) -> list[str]:
    """The VM's clock against Azure's, when it is off by more than a Date header can tell."""
    if skew is None or abs(skew) < 2:
        return []
    side = "behind" if skew > 0 else "ahead of"
    return [
        f"  clock:        the VM's is {abs(skew):.1f} s {side} Azure's (IMDS's Date); "
        "notice measured on Azure's"
    ]


def _details(s: Snapshot, verdict: Assessment, now: float) -> list[str]:
    poll = _ago(verdict.ages.get("last_poll_at"))
    if s.last_poll_at is not None:
        if s.last_poll_ok is True:
            poll += ", ok"
        elif s.last_poll_ok is False:
            poll += f", FAILED: {s.last_poll_error or 'unknown error'}"
        if s.last_poll_latency_ms is not None:
            poll += f", {s.last_poll_latency_ms:.1f} ms"
    q = "?"
    lines = [
        f"  last poll:    {poll}",
        (
            f"  polls:        {q if s.polls is None else s.polls} "
            f"({q if s.poll_errors is None else s.poll_errors} failed), "
            f"incarnation {q if s.last_incarnation is None else s.last_incarnation}"
        ),
        f"  status file:  written {_ago(verdict.ages.get('written_at'))}",
        *_skew(s.clock_skew_seconds),
        f"  open events:  {len(s.open_events) + (s.open_events_not_listed or 0)}"
        + (f" ({s.open_events_not_listed} not listed)" if s.open_events_not_listed else ""),
    ]
    for ev in s.open_events:
        affects = "affects this VM" if ev.AffectsThisVm else "other VMs"
        lines.append(
            f"    {ev.EventId}  {ev.EventType}  {ev.EventStatus}  "
            f"NotBefore {ev.NotBefore or '-'}  ({affects})"
        )
    lines.append(f"  sinks:        {len(s.sinks)}")
    for name, sink in sorted(s.sinks.items()):
        last = "never" if sink.last_delivery_at is None else _ago(now - sink.last_delivery_at)
        line = f"    {name:<16} spool {sink.spool_depth}, last delivery {last}"
        if sink.last_error:
            line += f", last error: {sink.last_error}"
        lines.append(line)
    lines.append(
        f"  records:      delivered {s.delivered}, failed deliveries "
        f"{s.failed_deliveries}, dropped {s.dropped}, dead-lettered {s.dead_lettered}"
        + (f", lost {s.lost}" if s.lost else "")
    )
    lines.append(
        f"  hooks:        running {s.hooks_running}, done {s.hooks_succeeded}, "
        f"failed {s.hooks_failed}"
        + (
            f" ({s.hook_secrets_refused} not run: secret environment refused)"
            if s.hook_secrets_refused
            else ""
        )
    )
    lines.append(f"  approvals:    sent {s.approvals_sent}, failed {s.approvals_failed}")
    if s.dry_run:
        lines.append(
            f"  policy:       DRY RUN, {s.dry_run_decisions} decision(s) logged, none carried out"
        )
    if s.acted_events:
        lines.append(f"  acted on:     {s.acted_events[0]}")
        lines += [f"                {line}" for line in s.acted_events[1:]]
    return lines


DEAD_LETTERS = "dead-letter.jsonl"


def _dead_letters(state_dir: Path, ack: bool, quiet: bool) -> Backlog | None:
    """The dead letters (acknowledged first when asked); None when unknown or there are none.
    ``quiet``: the acknowledgement is said on standard error (standard output is JSON)."""
    path = state_dir / DEAD_LETTERS
    try:
        if ack:
            done = acknowledge(path)
            print(
                f"acknowledged {done.records if done else 0} dead-lettered record(s) in {path}",
                file=sys.stderr if quiet else sys.stdout,
            )
            return done
        return backlog(path)
    except OSError as exc:
        print(f"se-forwarder status: dead letters: {path}: {exc.strerror or exc}", file=sys.stderr)
        return None


def run(args: argparse.Namespace) -> int:
    plat = oshost.current()
    state_dir = state_dir_or_report(args)
    if state_dir is None:
        return 2
    try:
        data = freshest(state_dir / health.STATUS_FILE, load)  # or its runtime copy
    except StatusFileError as exc:
        if args.json:
            print(
                json.dumps(
                    {
                        "healthy": False,
                        "state": health.HealthState.UNREADABLE,
                        "problems": [str(exc)],
                        "warnings": [],
                        "state_dir": str(state_dir),
                        "status": None,
                    }
                )
            )
        else:
            print(f"se-forwarder: UNREADABLE\n  PROBLEM:      {exc}")
        return 2
    if data is not None:  # an older agent may not have masked what it wrote
        data = redact.data(data, by_key=False)
    limits = Limits(
        args.stale_after, args.max_poll_age, args.max_failing, args.startup_grace, args.strict
    )
    if data is not None and is_collector(data):  # `se-forwarder collect`'s
        from ..collector import status as collector

        return collector.report(
            data, state_dir, limits, as_json=args.json, process_alive=plat.process_alive
        )
    snap, problems = health.read(data) if data is not None else (None, [])
    letters = _dead_letters(state_dir, args.ack_dead_letters, args.json)
    fs = filesystem(state_dir)  # what the agent may not be able to write down: read-only, full
    verdict = health.evaluate(
        snap,
        now=SYSTEM.wall_seconds(),
        limits=limits,
        read_problems=problems,
        process_alive=plat.process_alive,
        dead_letters=letters.pending if letters else None,
        filesystem=fs,
    )
    if data is not None and fs.problem:  # status.json as the agent would say it if it could
        data = dict(data, read_only=data.get("read_only") or fs.read_only)
        data["disk_full"] = data.get("disk_full") or (fs.full and not fs.read_only)
    if args.json:
        out = verdict.as_dict()
        out["state_dir"] = str(state_dir)
        out["status"] = data
        out["dead_letters"] = (
            None
            if letters is None
            else {
                "file": str(state_dir / DEAD_LETTERS),
                "total": letters.records,
                "acknowledged": letters.acknowledged,
                "pending": letters.pending,
            }
        )
        print(json.dumps(out, sort_keys=True))
    else:
        if snap is not None and fs.problem:
            snap = health.rules.with_filesystem(snap, fs)
        print(render_text(snap, verdict, state_dir, letters=letters), end="")
    return 0 if verdict.healthy else 1
