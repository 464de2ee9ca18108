"""When is the agent healthy? The ``status`` command's rules, over a ``Snapshot``.

Exit status of ``status``: 0 healthy; 1 unhealthy (no status file, agent stopped or dead, status
not refreshed, polling stalled or failing, still starting). Problems with a sink (delivery
errors, a growing spool, dropped records) are warnings and do not make the agent unhealthy: the
spool exists for exactly those outages, and restarting the agent would not help. ``strict``
turns warnings into problems. Dead letters are a loss a person must look at: while any is not
acknowledged (``status --ack-dead-letters``) the state is ``dead letters`` (exit 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum

from .snapshot import Snapshot, warnings
from .status_file import FileSystem

# Defaults, in seconds. The agent writes status.json every few seconds and polls once a second.
STALE_AFTER = 30.0  # status.json not rewritten for this long: agent hung or dead
MAX_POLL_AGE = 30.0  # no poll attempt for this long: polling loop stalled
# Polls failing (no good poll) for this long: unhealthy (a minute would let a Spot eviction's
# whole 30 s notice pass unseen). With status.json written every 5 s, `status` says so within
# 15 s of the first failure (or two poll intervals, when polls are slower).
MAX_FAILING = 10.0
STARTUP_GRACE = 150.0  # the first IMDS call may take up to 2 minutes


@dataclass(frozen=True, slots=True)
class Limits:
    stale_after: float = STALE_AFTER
    max_poll_age: float = MAX_POLL_AGE
    max_failing: float = MAX_FAILING
    startup_grace: float = STARTUP_GRACE
    strict: bool = False


class HealthState(StrEnum):
    """What ``status`` says of the agent (its exit code: 0 only when healthy)."""

    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    STARTING = "starting"  # no good poll yet, within the start-up grace
    STOPPED = "stopped"  # a clean stop recorded in status.json
    DEAD = "dead"  # status.json not refreshed: hung or not running
    MISSING = "missing"  # no status.json: never ran with this state directory
    DISK_FULL = "disk full"
    CANNOT_PERSIST = "cannot persist"
    UNREADABLE = "unreadable"  # status.json cannot be read at all (``status``)
    DEAD_LETTERS = "dead letters"  # some never deliverable, not yet acknowledged


@dataclass(slots=True)
class Assessment:
    state: HealthState
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ages: dict[str, float | None] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return self.state == HealthState.HEALTHY

    def as_dict(self) -> dict[str, object]:
        return {
            "healthy": self.healthy,
            "state": self.state,
            "problems": self.problems,
            "warnings": self.warnings,
            "ages": self.ages,
        }


def evaluate(
    snap: Snapshot | None,
    *,
    now: float,
    limits: Limits = Limits(),
    read_problems: list[str] | None = None,
    process_alive: Callable[[int], bool | None] | None = None,
    dead_letters: int | None = None,
    filesystem: FileSystem | None = None,
) -> Assessment:
    """Judge a snapshot (None: no status.json). Pure apart from ``process_alive`` (injected).
    ``dead_letters``: dead-lettered records nobody acknowledged (None: not known; then the
    run's own count is a warning). ``filesystem``: what ``status`` found of the state
    directory's file system itself: read-only, the agent cannot write status.json to say so, and
    without a runtime copy ``status`` would read the last one, HEALTHY, until it went stale."""
    if snap is None:
        return Assessment(
            HealthState.MISSING,
            [
                (
                    "no status.json: the agent has never run with "
                    "this state directory, or it is not installed"
                )
            ],
        )
    if filesystem is not None and filesystem.problem and not snap.stopped:
        snap = with_filesystem(snap, filesystem)
    v = Assessment(HealthState.HEALTHY, list(read_problems or []))
    for key in ("written_at", "started_at", "last_poll_at", "last_poll_ok_at"):
        t = getattr(snap, key)
        v.ages[key] = None if t is None else round(now - t, 3)
    if snap.stopped:
        v.state = HealthState.STOPPED
        v.problems.append("the agent stopped (clean stop recorded in status.json)")
    else:
        _liveness(snap, v, limits, process_alive)
        if v.state in (HealthState.HEALTHY, HealthState.UNHEALTHY):
            _polling(snap, v, limits)
        if snap.persist_error and v.state in (
            HealthState.HEALTHY,
            HealthState.UNHEALTHY,
            HealthState.STARTING,
        ):
            v.state = HealthState.DISK_FULL if snap.disk_full else HealthState.CANNOT_PERSIST
            v.problems.append(
                f"cannot persist records to the state directory "
                f"({snap.persist_failures} failed commits): {snap.persist_error}"
            )
    _sinks(snap, v, dead_letters is None)
    if dead_letters:
        if v.state == HealthState.HEALTHY:
            v.state = HealthState.DEAD_LETTERS
        v.problems.append(
            f"{dead_letters} dead-lettered record(s) not acknowledged: read "
            "dead-letter.jsonl (and dead-letter.jsonl.1, the previous one) in the state "
            "directory, then run "
            "`se-forwarder status --ack-dead-letters`"
        )
    if v.state == HealthState.HEALTHY and (v.problems or (limits.strict and v.warnings)):
        v.state = HealthState.UNHEALTHY
    return v


def with_filesystem(snap: Snapshot, fs: FileSystem) -> Snapshot:
    """``snap`` with what the file system says of itself: read-only, full."""
    return replace(
        snap,
        read_only=snap.read_only or fs.read_only,
        disk_full=snap.disk_full or (fs.full and not fs.read_only),
        persist_error=snap.persist_error or fs.problem,
    )


def _liveness(
    snap: Snapshot,
    v: Assessment,
    limits: Limits,
    process_alive: Callable[[int], bool | None] | None,
) -> None:
    if snap.pid is not None and process_alive is not None and process_alive(snap.pid) is False:
        v.state = HealthState.DEAD
        v.problems.append(f"the agent (pid {snap.pid}) is not running and did not stop cleanly")
    written = v.ages["written_at"]
    if written is None:
        v.problems.append("status.json has no written_at")
    elif written > limits.stale_after:
        if v.state == HealthState.HEALTHY:
            v.state = HealthState.UNHEALTHY
        v.problems.append(
            f"status.json not refreshed for {written:.0f}s (limit "
            f"{limits.stale_after:.0f}s): the agent is hung or not running"
        )


def _polling(snap: Snapshot, v: Assessment, limits: Limits) -> None:
    started, polled = v.ages["started_at"], v.ages["last_poll_at"]
    young = started is not None and started <= limits.startup_grace
    max_poll_age = limits.max_poll_age
    if snap.poll_interval and snap.poll_interval > 0:  # a slower poll widens the stall limit
        max_poll_age = max(max_poll_age, 5 * snap.poll_interval)
    if polled is None:
        if young:
            v.state = HealthState.STARTING
            v.problems.append(
                f"no poll completed yet; started {started:.0f}s ago (the first IMDS "
                "call may take up to 2 minutes)"
            )
        else:
            v.state = HealthState.UNHEALTHY
            v.problems.append("no poll of IMDS has completed since the agent started")
        return
    if polled > max_poll_age:
        v.state = HealthState.UNHEALTHY
        v.problems.append(
            f"last poll {polled:.0f}s ago (limit {max_poll_age:.0f}s): polling stalled"
        )
    if snap.last_poll_ok is not False:
        return
    err = snap.last_poll_error or "unknown error"
    never_ok = (
        snap.last_poll_ok_at is None and snap.polls is not None and snap.polls == snap.poll_errors
    )
    if never_ok and v.state == HealthState.HEALTHY and young:  # no good poll yet: not healthy yet
        v.state = HealthState.STARTING
        v.problems.append(f"no successful poll yet; started {started:.0f}s ago; last error: {err}")
        return
    # How long has it been failing? Since the last good poll, if recorded; otherwise since start
    # if no poll ever succeeded.
    failing_for = (
        v.ages["last_poll_ok_at"]
        if snap.last_poll_ok_at is not None
        else (started if never_ok else None)
    )
    max_failing = limits.max_failing
    if snap.poll_interval and snap.poll_interval > 0:  # one slow poll's gap is no failure yet
        max_failing = max(max_failing, 2 * snap.poll_interval)
    if failing_for is not None and failing_for <= max_failing:
        v.warnings.append(f"last poll failed ({failing_for:.0f}s): {err}")
    else:
        v.state = HealthState.UNHEALTHY
        span = "" if failing_for is None else f" for {failing_for:.0f}s"
        v.problems.append(f"polls of IMDS failing{span}: {err}")


def _sinks(snap: Snapshot, v: Assessment, run_dead_letters: bool = True) -> None:
    for name, sink in sorted(snap.sinks.items()):
        if sink.last_error:
            v.warnings.append(f"sink {name}: {sink.last_error}")
    # the counters declared with ``warn`` (dropped, dead-lettered); the run's dead letters only
    # when the file's are not known (then ``evaluate`` judges those)
    v.warnings += [
        w for w in warnings(snap) if run_dead_letters or not w.endswith(" dead-lettered")
    ]
