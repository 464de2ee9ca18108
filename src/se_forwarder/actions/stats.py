"""What the policy's actions show in ``status`` and the heartbeat, and the agent's stand-in for
them while the policy only observes (the default): the hooks, the approver and ``subprocess``
are then never imported, so an observing agent pays nothing for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..model import LifecycleRecord
    from ..recording.recorder import Recorder


@dataclass(frozen=True, slots=True)
class ActionStats:
    """What ``status`` and the heartbeat show (counters since this agent process started)."""

    hooks_running: int = 0
    hooks_succeeded: int = 0
    hooks_failed: int = 0  # non-zero exit, timeout, could not start, interrupted by a crash
    approvals_sent: int = 0
    approvals_failed: int = 0
    dry_run_decisions: int = 0
    dry_run: bool = False
    acted_events: tuple[str, ...] = ()  # what the policy did for each recent event, one line each
    hook_secrets_refused: int = 0  # runs not started: env_file or env_credentials refused


class Observe:
    """The default policy: no hooks, no approvals, nothing running."""

    enabled = False

    def start(self, recorder: Recorder) -> None:
        pass

    def identified(self) -> None:
        pass

    def stop(self, grace: float = 2.0) -> None:
        pass

    def stats(self) -> ActionStats:
        return ActionStats()

    def on_records(self, records: list[LifecycleRecord]) -> None:
        pass
