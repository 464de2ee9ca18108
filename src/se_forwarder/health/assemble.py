"""The running agent's snapshot, taken once from its parts: the recorder's poll counters, the
poll loop's last attempt, the outbox, the delivery workers and the policy's actions. Counters are
handed over by name (``fields.by_name``): a part counts a field the declaration names, and it
reaches status.json, the heartbeat and the metrics."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .. import __version__
from ..actions import ActionStats
from ..clock import Clock
from ..delivery import DeliveryPool
from ..delivery.pool import DEAD_LETTERS_DROPPED
from ..loop import PollLoop
from ..model import VmIdentity
from ..outbox import Store
from ..outbox.drops import DROPPED_HEARTBEATS
from ..outbox.space import is_disk_full
from ..recording.recorder import Recorder
from ..timefmt import format_ms
from ..tracker import TrackerState
from .fields import by_name
from .snapshot import OpenEvent, SinkHealth, Snapshot
from .status_file import StatusFile

# Store counters the heartbeats report per agent run, each with ``<name>_reported`` (what a
# committed heartbeat included): the spool bound's drops, the records a damaged database lost,
# the dead-letter lines dropped at the file's bound (records and heartbeat rows apart).
CARRIED = ("dropped", DROPPED_HEARTBEATS, "lost", DEAD_LETTERS_DROPPED)


def open_events(state: TrackerState, vm: VmIdentity) -> tuple[OpenEvent, ...]:
    """The events open in ``state``, as the heartbeat's OpenEventList shows them."""
    return tuple(
        OpenEvent(
            eid,
            te.view.event_type,
            te.view.status,
            te.view.source,
            format_ms(te.view.not_before_ms),
            te.view.duration,
            vm.affects(te.view.resources),
        )
        for eid, te in state.events.items()
    )


class HealthView:
    def __init__(
        self,
        *,
        recorder: Recorder,
        loop: PollLoop,
        store: Store,
        delivery: DeliveryPool,
        actions: Callable[[], ActionStats],
        vm: Callable[[], VmIdentity],
        poll_interval: float,
        clock: Clock,
        status: StatusFile | None = None,
        tags_truncated: Callable[[], int] = lambda: 0,
    ) -> None:
        self.recorder, self.loop, self.store, self.delivery = recorder, loop, store, delivery
        self.status = status
        self.tags_truncated = tags_truncated  # tag values cut or left out (imds/tags.py)
        self.actions, self.vm, self.poll_interval, self.clock = actions, vm, poll_interval, clock
        self.started_at = clock.wall_seconds()
        self._started_mono = clock.monotonic()
        # Drops (and losses) are reported by heartbeats as a count per agent run; those the
        # previous run made after its last heartbeat are carried into this run's (the baseline
        # is what was reported).
        self.bases = {name: store.counter(f"{name}_reported") for name in CARRIED}

    def snapshot(self, *, stopped: bool = False) -> Snapshot:
        """Everything status.json and the heartbeat say, taken once."""
        return Snapshot(**self.values(stopped=stopped))

    def values(self, *, stopped: bool = False) -> dict[str, Any]:
        stats = self.recorder.stats
        state = self.recorder.state
        depths = self.store.depths()
        clock = self.clock
        return {
            **by_name(Snapshot, stats),
            **by_name(Snapshot, self.actions()),
            **by_name(Snapshot, self.delivery.totals()),
            "version": __version__,
            "pid": os.getpid(),
            "started_at": self.started_at,
            "written_at": clock.wall_seconds(),
            "poll_interval": self.poll_interval,
            "uptime_seconds": clock.monotonic() - self._started_mono,
            "last_poll_at": self.loop.last_poll_at,
            "last_poll_ok": stats.last_ok,
            "last_poll_ok_at": None if stats.last_ok_ms is None else stats.last_ok_ms / 1000,
            "last_poll_error": None if stats.last_ok else stats.last_error,
            "last_poll_latency_ms": self.loop.last_latency_ms,
            "last_incarnation": state.last_incarnation,
            "clock_skew_seconds": self.recorder.azure.skew_seconds,
            "truncated_values": stats.truncated_values + self.tags_truncated(),
            "open_events": open_events(state, self.vm()),
            "open_events_not_listed": 0,  # all of them are here; status.json lists the first
            **{name: self.store.counter(name) - base for name, base in self.bases.items()},
            "spool_depth": max(depths.values(), default=0),
            "sinks": {
                name: SinkHealth(spool_depth=depths.get(name, 0), **by_name(SinkHealth, s))
                for name, s in self.delivery.stats().items()
            },
            "stopped": stopped,
            **self._state_dir(),
        }

    def _state_dir(self) -> dict[str, Any]:
        """What the status file found out about the state directory: it cannot be written (a
        full or read-only file system), even when no commit has failed yet."""
        if self.status is None:
            return {}
        out: dict[str, Any] = {"runtime_copy": str(self.status.copy) if self.status.copy else None}
        problem, stats = self.status.problem, self.recorder.stats
        if problem is not None and stats.persist_error is None:
            out["persist_error"] = f"status.json: {problem}"
            out["disk_full"] = is_disk_full(problem)
        failed = problem or stats.persist_error
        out["read_only"] = bool(failed) and "Read-only file system" in str(failed)
        return out
