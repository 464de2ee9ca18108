"""``se-forwarder status``: is the agent healthy? For people, probes and installers.

Reads ``<state_dir>/status.json`` (written atomically by the running agent every few seconds and
at a clean stop) and nothing else, so it works as any user that can read the state directory and
never touches the agent's SQLite files.

Exit status: 0 healthy; 1 unhealthy (no status file, agent stopped or dead, status not refreshed,
polling stalled or failing, still starting); 2 bad usage or an unreadable/corrupt status file.
Problems with a sink (delivery errors, a growing spool, dropped records) are reported as warnings
and do not make the agent unhealthy: the spool exists for exactly those outages, and restarting
the agent would not help. ``--strict`` turns warnings into problems.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from se_forwarder import platform as _platform

# Defaults, in seconds. The agent writes status.json every few seconds and polls once a second.
DEFAULT_STALE_AFTER = 30.0  # status.json not rewritten for this long: agent hung or dead
DEFAULT_MAX_POLL_AGE = 30.0  # no poll attempt for this long: polling loop stalled
DEFAULT_MAX_FAILING = 60.0  # polls failing (no good poll) for this long: unhealthy
DEFAULT_STARTUP_GRACE = 150.0  # the first IMDS call may take up to 2 minutes


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = "Show the agent's health from its state directory (exit 1 if unhealthy)."
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="state directory holding status.json (default: $SE_FORWARDER_STATE_DIR or "
        f"{_platform.current().default_state_dir()})",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--stale-after", type=float, default=DEFAULT_STALE_AFTER, metavar="SECONDS",
        help="unhealthy when status.json is older than this (default %(default)s)",
    )
    parser.add_argument(
        "--max-poll-age", type=float, default=DEFAULT_MAX_POLL_AGE, metavar="SECONDS",
        help="unhealthy when the last poll attempt is older than this (default %(default)s)",
    )
    parser.add_argument(
        "--max-failing", type=float, default=DEFAULT_MAX_FAILING, metavar="SECONDS",
        help="unhealthy when polls have failed for this long (default %(default)s)",
    )
    parser.add_argument(
        "--startup-grace", type=float, default=DEFAULT_STARTUP_GRACE, metavar="SECONDS",
        help="report 'starting' rather than failed while no poll has completed yet within "
        "this long after start (default %(default)s; still exit 1)",
    )
    parser.add_argument(
        "--strict", action="store_true",
        help="also fail on sink warnings (delivery errors, dropped or dead-lettered records)",
    )


# -- time ------------------------------------------------------------------------------------

def parse_time(value: Any) -> float | None:
    """A status.json timestamp as epoch seconds.

    Accepts ISO 8601 strings (``...Z`` or with offset; naive = UTC), epoch milliseconds
    (integers above 1e11) and epoch seconds. None/empty gives None; anything else ValueError.
    """
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"not a time: {value!r}")
        return value / 1000.0 if abs(value) > 1e11 else float(value)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        dt = datetime.fromisoformat(text)
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        return dt.timestamp()
    raise ValueError(f"not a time: {value!r}")


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


# -- evaluation ------------------------------------------------------------------------------

class StatusFileError(Exception):
    """status.json exists but cannot be read or is not a JSON object."""


def load(path: Path) -> dict[str, Any] | None:
    """The parsed status file, None if it does not exist; StatusFileError if unusable."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StatusFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StatusFileError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise StatusFileError(f"{path} does not hold a JSON object")
    return data


def evaluate(
    status: dict[str, Any] | None,
    *,
    now: float,
    stale_after: float = DEFAULT_STALE_AFTER,
    max_poll_age: float = DEFAULT_MAX_POLL_AGE,
    max_failing: float = DEFAULT_MAX_FAILING,
    startup_grace: float = DEFAULT_STARTUP_GRACE,
    strict: bool = False,
    process_alive: Callable[[int], bool | None] | None = None,
) -> dict[str, Any]:
    """Judge a status document. Pure apart from ``process_alive`` (injected).

    Returns ``{"healthy", "state", "problems", "warnings", "ages"}``; ``state`` is one of
    ``missing``, ``stopped``, ``dead``, ``starting``, ``unhealthy``, ``healthy``.
    """
    problems: list[str] = []
    warnings: list[str] = []
    ages: dict[str, float | None] = {}

    if status is None:
        return {
            "healthy": False,
            "state": "missing",
            "problems": [("no status.json: the agent has never run with this state directory, "
                          "or it is not installed")],
            "warnings": [],
            "ages": ages,
        }

    def age_of(key: str) -> float | None:
        try:
            t = parse_time(status.get(key))
        except (ValueError, TypeError):
            problems.append(f"{key} is not a valid time: {status.get(key)!r}")
            ages[key] = None
            return None
        ages[key] = None if t is None else round(now - t, 3)
        return ages[key]

    # A slower configured poll interval (reported by the agent) widens the stall limit.
    interval = status.get("poll_interval")
    if isinstance(interval, (int, float)) and not isinstance(interval, bool) and interval > 0:
        max_poll_age = max(max_poll_age, 5 * float(interval))

    written_age = age_of("written_at")
    started_age = age_of("started_at")
    poll_age = age_of("last_poll_at")
    ok_age = age_of("last_poll_ok_at") if "last_poll_ok_at" in status else None

    state = "healthy"
    if status.get("stopped") is True:
        state = "stopped"
        problems.append("the agent stopped (clean stop recorded in status.json)")
    else:
        pid = status.get("pid")
        if (isinstance(pid, int) and not isinstance(pid, bool) and process_alive is not None
                and process_alive(pid) is False):
            state = "dead"
            problems.append(f"the agent (pid {pid}) is not running and did not stop cleanly")
        if written_age is None:
            problems.append("status.json has no written_at")
        elif written_age > stale_after:
            if state == "healthy":
                state = "unhealthy"
            problems.append(
                f"status.json not refreshed for {written_age:.0f}s (limit {stale_after:.0f}s): "
                "the agent is hung or not running"
            )

        if state in ("healthy", "unhealthy"):
            if poll_age is None:
                if started_age is not None and started_age <= startup_grace:
                    state = "starting"
                    problems.append(
                        f"no poll completed yet; started {started_age:.0f}s ago (the first IMDS "
                        "call may take up to 2 minutes)"
                    )
                else:
                    state = "unhealthy"
                    problems.append("no poll of IMDS has completed since the agent started")
            else:
                if poll_age > max_poll_age:
                    state = "unhealthy"
                    problems.append(
                        f"last poll {poll_age:.0f}s ago (limit {max_poll_age:.0f}s): polling stalled"
                    )
                never_ok = (status.get("last_poll_ok") is False
                            and not status.get("last_poll_ok_at")
                            and status.get("polls") is not None
                            and status.get("polls") == status.get("poll_errors"))
                if (never_ok and state == "healthy" and started_age is not None
                        and started_age <= startup_grace):
                    # an agent that has never had a good poll is not healthy yet
                    state = "starting"
                    problems.append(
                        f"no successful poll yet; started {started_age:.0f}s ago; last error: "
                        f"{status.get('last_poll_error') or 'unknown error'}"
                    )
                elif status.get("last_poll_ok") is False:
                    err = status.get("last_poll_error") or "unknown error"
                    # How long has it been failing? Since the last good poll, if recorded;
                    # otherwise since start if no poll ever succeeded (polls == poll_errors).
                    if ok_age is not None:
                        failing_for: float | None = ok_age
                    elif (status.get("polls") is not None
                          and status.get("polls") == status.get("poll_errors")):
                        failing_for = started_age
                    else:
                        failing_for = None
                    if failing_for is not None and failing_for <= max_failing:
                        warnings.append(f"last poll failed ({failing_for:.0f}s): {err}")
                    else:
                        state = "unhealthy"
                        span = "" if failing_for is None else f" for {failing_for:.0f}s"
                        problems.append(f"polls of IMDS failing{span}: {err}")

    for name, sink in sorted((status.get("sinks") or {}).items()):
        if isinstance(sink, dict) and sink.get("last_error"):
            warnings.append(f"sink {name}: {sink['last_error']}")
    for key in ("dropped", "dead_lettered"):
        if isinstance(status.get(key), int) and status[key] > 0:
            warnings.append(f"{status[key]} record(s) {key.replace('_', '-')}")

    if strict and warnings and state == "healthy":
        state = "unhealthy"
    healthy = state == "healthy" and not problems and not (strict and warnings)
    if not healthy and state == "healthy":
        state = "unhealthy"
    return {
        "healthy": healthy,
        "state": state,
        "problems": problems,
        "warnings": warnings,
        "ages": ages,
    }


# -- output ----------------------------------------------------------------------------------

def render_text(status: dict[str, Any] | None, verdict: dict[str, Any], state_dir: Path) -> str:
    lines: list[str] = []
    s = status or {}
    head = f"se-forwarder: {verdict['state'].upper()}"
    extras = []
    if s.get("pid") is not None:
        extras.append(f"pid {s['pid']}")
    if s.get("version"):
        extras.append(f"version {s['version']}")
    if verdict["ages"].get("started_at") is not None:
        extras.append(f"started {_ago(verdict['ages']['started_at'])}")
    if extras:
        head += " (" + ", ".join(extras) + ")"
    lines.append(head)
    lines.append(f"  state dir:    {state_dir}")
    for p in verdict["problems"]:
        lines.append(f"  PROBLEM:      {p}")
    for w in verdict["warnings"]:
        lines.append(f"  warning:      {w}")
    if status is None:
        return "\n".join(lines) + "\n"

    ages = verdict["ages"]
    poll = f"{_ago(ages.get('last_poll_at'))}"
    if s.get("last_poll_at"):
        if s.get("last_poll_ok") is True:
            poll += ", ok"
        elif s.get("last_poll_ok") is False:
            poll += f", FAILED: {s.get('last_poll_error') or 'unknown error'}"
        latency = s.get("last_poll_latency_ms")
        if isinstance(latency, (int, float)) and not isinstance(latency, bool):
            poll += f", {latency:.1f} ms"
    lines.append(f"  last poll:    {poll}")
    lines.append(
        f"  polls:        {s.get('polls', '?')} ({s.get('poll_errors', '?')} failed), "
        f"incarnation {s.get('last_incarnation', '?')}"
    )
    lines.append(f"  status file:  written {_ago(ages.get('written_at'))}")

    events = s.get("open_events") or []
    lines.append(f"  open events:  {len(events)}")
    for ev in events:
        if not isinstance(ev, dict):
            continue
        affects = "affects this VM" if ev.get("AffectsThisVm") else "other VMs"
        nb = ev.get("NotBefore") or "-"
        lines.append(
            f"    {ev.get('EventId', '?')}  {ev.get('EventType', '?')}  "
            f"{ev.get('EventStatus', '?')}  NotBefore {nb}  ({affects})"
        )

    sinks = s.get("sinks") or {}
    lines.append(f"  sinks:        {len(sinks)}")
    for name, sink in sorted(sinks.items()):
        if not isinstance(sink, dict):
            continue
        try:
            last = parse_time(sink.get("last_delivery_at"))
        except (ValueError, TypeError):
            last = None
        last_txt = "never" if last is None else _ago(time.time() - last)
        line = f"    {name:<16} spool {sink.get('spool_depth', '?')}, last delivery {last_txt}"
        if sink.get("last_error"):
            line += f", last error: {sink['last_error']}"
        lines.append(line)
    lines.append(
        f"  records:      delivered {s.get('delivered', 0)}, failed deliveries "
        f"{s.get('failed_deliveries', 0)}, dropped {s.get('dropped', 0)}, dead-lettered "
        f"{s.get('dead_lettered', 0)}"
    )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    plat = _platform.current()
    state_dir = Path(args.state_dir) if args.state_dir is not None else Path(
        plat.default_state_dir()
    )
    path = state_dir / "status.json"
    try:
        status = load(path)
    except StatusFileError as exc:
        if args.json:
            print(json.dumps({"healthy": False, "state": "unreadable", "problems": [str(exc)],
                              "warnings": [], "state_dir": str(state_dir), "status": None}))
        else:
            print(f"se-forwarder: UNREADABLE\n  PROBLEM:      {exc}")
        return 2
    verdict = evaluate(
        status,
        now=time.time(),
        stale_after=args.stale_after,
        max_poll_age=args.max_poll_age,
        max_failing=args.max_failing,
        startup_grace=args.startup_grace,
        strict=args.strict,
        process_alive=plat.process_alive,
    )
    if args.json:
        out = dict(verdict)
        out["state_dir"] = str(state_dir)
        out["status"] = status
        print(json.dumps(out, indent=None, sort_keys=True))
    else:
        print(render_text(status, verdict, state_dir), end="")
    return 0 if verdict["healthy"] else 1


def main(argv: list[str] | None = None) -> int:
    """Standalone entry point (``python -m se_forwarder.status``) until cli.py wires it."""
    parser = argparse.ArgumentParser(prog="se-forwarder status")
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
