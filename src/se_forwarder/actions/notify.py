"""The notices the policy's actions give (``se_forwarder.notices``): a hook that did not succeed,
an approval given up, an event that started before its hooks finished; each once, committed to
the outbox with its key, then the sinks woken.

The controller tells this object what happens (records seen, pre-hook work queued, running and
done, hook results, approvals given up); it keeps only what a notice needs: each open event's last
record, and which events have pre-hook work under way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from .. import logs, notices
from ..clock import Clock
from ..hooks.states import HookState
from ..model import EventStatus, LifecycleRecord, Phase
from ..notices import Notice
from ..outbox import Store

_WHAT: dict[str, str] = {
    HookState.FAILED: "failed",
    HookState.TIMEOUT: "timed out",
    HookState.ERROR: "could not start",
    HookState.INTERRUPTED: "was interrupted by a restart of the agent (not run again)",
    HookState.STOPPED: "was killed: the agent was stopping",
}


@dataclass
class _Busy:
    """An event's pre-hook runs: how many are queued, and the hook running now."""

    queued: int = 0
    hook: str | None = None


class Notifier:
    def __init__(
        self,
        store: Store,
        log: logging.Logger,
        clock: Clock,
        wake: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.log = log
        self.clock = clock
        self.wake = wake  # the delivery workers: a notice is waiting
        self._lock = threading.Lock()
        self._last: dict[str, LifecycleRecord] = {}  # open event -> its last record
        self._busy: dict[str, _Busy] = {}  # event -> its pre-hooks

    # -- what the controller tells it -----------------------------------------------------------

    def seen(self, r: LifecycleRecord) -> None:
        """A committed record: remembered while its event is open; an event seen Started while
        pre-hook work is queued or running gets its notice."""
        with self._lock:
            if r.Phase == Phase.REMOVED:
                self._last.pop(r.EventId, None)
            elif r.Phase != Phase.APPROVED:
                self._last[r.EventId] = r
            busy = self._busy.get(r.EventId) if r.EventStatus == EventStatus.STARTED else None
        if busy is not None and r.Phase != Phase.REMOVED:
            hook = busy.hook
            reason = (
                f"hook {hook} was still running"
                if hook
                else "its hooks before it had not started yet"
            )
            self._commit(
                Notice(
                    notices.STARTED_BEFORE_HOOKS,
                    r,
                    self.clock.wall_ms(),
                    hook=hook,
                    hook_phase="pre",
                    reason=reason,
                )
            )

    def queued(self, eid: str) -> None:
        with self._lock:
            self._busy.setdefault(eid, _Busy()).queued += 1

    def running(self, eid: str, hook: str | None) -> None:
        with self._lock:
            if eid in self._busy:
                self._busy[eid].hook = hook

    def done(self, eid: str) -> None:
        with self._lock:
            busy = self._busy.get(eid)
            if busy is not None:
                busy.queued -= 1
                busy.hook = None
                if busy.queued <= 0:
                    del self._busy[eid]

    def hook_failed(
        self,
        r: LifecycleRecord,
        hook: str,
        phase: str,
        state: str,
        exit_code: int | None = None,
        *,
        timeout: float | None = None,
        consequence: str = "",
    ) -> None:
        what = _WHAT.get(state, state)
        if state == HookState.FAILED and exit_code is not None:
            what += f" (exit {exit_code})"
        elif state == HookState.TIMEOUT and timeout is not None:
            what += f" after {timeout:g} s"
        self._commit(
            Notice(
                notices.HOOK_FAILED,
                self._facts(r),
                self.clock.wall_ms(),
                hook=hook,
                hook_phase=phase,
                state=state,
                exit_code=exit_code,
                reason=what,
                consequence=consequence,
            )
        )

    def approval_given_up(self, eid: str, why: str) -> None:
        with self._lock:
            r = self._last.get(eid)
        if r is None:  # ended meanwhile: nothing left to tell
            return
        self._commit(
            Notice(
                notices.APPROVAL_GIVEN_UP,
                r,
                self.clock.wall_ms(),
                reason=why,
                consequence="it starts at NotBefore",
            )
        )

    def prune(self, open_ids: set[str]) -> None:
        try:
            notices.prune(self.store, open_ids, self.clock.wall_ms())
        except Exception as exc:
            logs.event(self.log, logging.WARNING, "cannot prune the notices' keys", error=str(exc))

    # -- inside ---------------------------------------------------------------------------------

    def _facts(self, r: LifecycleRecord) -> LifecycleRecord:
        """The event's latest record (a post hook's Removed is itself the latest)."""
        with self._lock:
            last = self._last.get(r.EventId)
        return r if last is None or r.Phase == Phase.REMOVED else last

    def _commit(self, notice: Notice) -> None:
        try:
            if not notices.commit(self.store, notice):
                return  # told before (this run or an earlier one)
        except Exception as exc:
            logs.event(
                self.log,
                logging.ERROR,
                "cannot commit a notice; it is not sent",
                EventId=notice.record.EventId,
                notice=notice.kind,
                error=str(exc),
            )
            return
        logs.event(
            self.log,
            logging.INFO,
            "notice",
            notice=notice.kind,
            EventId=notice.record.EventId,
            hook=notice.hook,
            reason=notice.reason,
        )
        if self.wake is not None:
            self.wake()
