"""Heartbeats: the snapshot as a row of the heartbeat table, committed to the outbox with the
tracker state and, in the same transaction, the drops it reports (so drops made after the last
heartbeat of a run that was killed reach the first heartbeat of the next)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from .. import logs
from ..clock import Clock
from ..model import Heartbeat, VmIdentity
from ..recording.recorder import Recorder
from ..timefmt import format_ms
from .assemble import HealthView
from .snapshot import Snapshot


class Heartbeats:
    def __init__(
        self,
        view: HealthView,
        recorder: Recorder,
        vm: Callable[[], VmIdentity],
        *,
        committed: Callable[[], None],
        clock: Clock,
    ) -> None:
        self.view, self.recorder, self.vm = view, recorder, vm
        self.committed = committed  # wakes the delivery workers
        self.clock = clock
        self.log = logs.get("agent")

    def build(self, reason: str, snap: Snapshot | None = None) -> Heartbeat:
        return (snap or self.view.snapshot()).heartbeat(
            reason, self.vm(), format_ms(self.clock.wall_ms()), str(uuid.uuid4())
        )

    def send(self, reason: str) -> None:
        """``start``, ``periodic`` or ``stop``."""
        snap = self.view.snapshot()
        hb = self.build(reason, snap)
        reported = {
            f"counter:{name}_reported": base + getattr(snap, name)
            for name, base in self.view.bases.items()
        }
        if not self.recorder.enqueue(hb, reported):
            return
        logs.event(
            self.log,
            logging.INFO,
            "heartbeat",
            Reason=reason,
            Polls=hb.Polls,
            PollErrors=hb.PollErrors,
            SpoolDepth=hb.SpoolDepth,
            DroppedRecords=hb.DroppedRecords,
        )
        self.committed()
