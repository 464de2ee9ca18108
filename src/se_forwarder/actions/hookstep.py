"""One hook run for an event, as the controller's lanes do it: at most once (claimed in the
journal before its process starts, its result saved), counted, its failure told once as a notice
and noted in what the event got (``Book``). A dry run logs and counts it instead.

A mixin of ``Actions`` (controller.py), which owns the state it uses: the policy, the journal,
the notifier, the book, the clock, the counters and the running hooks.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from .. import logs, redact
from ..hooks import Journal
from ..hooks.environment import environment, raw_variables, unsafe_characters
from ..hooks.runner import HookRun, Running, run
from ..hooks.states import HookState
from ..model import LifecycleRecord

if TYPE_CHECKING:
    from ..clock import Clock
    from ..policy import Policy
    from .book import Book
    from .notify import Notifier

PRE, POST = "pre", "post"


class HookSteps:
    policy: Policy
    journal: Journal
    notify: Notifier
    book: Book
    clock: Clock
    log: logging.Logger
    _lock: threading.Lock
    _running: set[Running]
    _interrupted: set[str]
    _pre_ran: set[str]

    def _count(self, what: str) -> None:
        raise NotImplementedError

    def _ran(self, eid: str, post: bool) -> None:
        """A pre-hook of the event ran (or would have, in a dry run): its post-hooks may run."""
        if not post:
            with self._lock:
                self._pre_ran.add(eid)

    def _judge(self, r: LifecycleRecord, phase: str, hook: str, then: str = "") -> bool | None:
        """A hook that has a journal entry already: True if it succeeded, False if it failed and
        that is reported now, None if it failed and was reported before (by this run, or by an
        earlier one: every restart used to report interrupted hooks again). One claimed with
        no result ran when the agent died: a failure, recorded as interrupted, told once, never
        run again."""
        eid = r.EventId
        entry = self.journal.get(eid, phase, hook)
        if entry is None or entry.state == HookState.OK:
            return entry is not None
        key = Journal.key(eid, phase, hook)
        if entry.state != HookState.STARTED or key in self._interrupted:
            return None
        self._interrupted.add(key)  # once in this run even if the journal cannot be written
        try:
            self.journal.interrupted(eid, phase, hook, entry)
        except Exception as exc:
            logs.event(
                self.log,
                logging.WARNING,
                "cannot record an interrupted hook",
                EventId=eid,
                hook=hook,
                phase=phase,
                error=str(exc),
            )
        self._count("failed")
        logs.event(
            self.log,
            logging.ERROR,
            "hook was interrupted by a restart of the agent; not run again (at most once)",
            EventId=eid,
            hook=hook,
            phase=phase,
        )
        self.notify.hook_failed(r, hook, phase, HookState.INTERRUPTED, consequence=then)
        return False

    def _hook(
        self, r: LifecycleRecord, name: str, phase: str, hook_phase: str, then: str = ""
    ) -> bool | None:
        """Run one hook (at most once); ``then``: what its failure means for the event."""
        fields = {"EventId": r.EventId, "hook": name, "phase": phase}
        post = hook_phase == POST
        if self.policy.dry_run:
            return self._would(r, name, post, fields)
        try:
            if not self.journal.claim(r.EventId, phase, name, self.clock.wall_ms()):
                return self._judge(r, phase, name, then)
        except Exception as exc:
            self._count("failed")
            logs.event(
                self.log,
                logging.ERROR,
                "hook not run: cannot record it in the state database",
                **fields,
                error=str(exc),
            )
            return False
        self._ran(r.EventId, post)
        self.book.running(r.EventId, name, post)
        try:
            result = self._execute(r, name, hook_phase, fields)
        except Exception as exc:  # a bug: the hook failed, and that is recorded
            self.log.error(
                "hook not run: internal error (please report it)",
                exc_info=exc,
                extra={"fields": fields},
            )
            result = HookRun(HookState.ERROR, None, 0.0, 0)
        try:
            self.journal.finish(
                r.EventId, phase, name, result.state, self.clock.wall_ms(), result.exit_code
            )
        except Exception as exc:
            logs.event(
                self.log, logging.ERROR, "cannot record a hook's result", **fields, error=str(exc)
            )
        self._count("ok" if result.ok else "failed")
        self.book.hook(r.EventId, name, post, result.state)
        if not result.ok:
            self.notify.hook_failed(
                r,
                name,
                phase,
                result.state,
                result.exit_code,
                timeout=self.policy.config.hooks[name].timeout,
                consequence=then,
            )
        return result.ok

    def _would(self, r: LifecycleRecord, name: str, post: bool, fields: dict[str, Any]) -> bool:
        self._ran(r.EventId, post)
        self.book.would(r.EventId, name, post)
        self._count("dry")
        logs.event(
            self.log,
            logging.INFO,
            "dry run: would run hook",
            **fields,
            command=redact.argv(self.policy.config.hooks[name].argv()),
        )
        return True

    def _execute(
        self, r: LifecycleRecord, name: str, hook_phase: str, fields: dict[str, Any]
    ) -> HookRun:
        hook = self.policy.config.hooks[name]
        try:
            secrets = hook.secrets()
        except ValueError as exc:  # a link, a mode, an owner, a credential gone: one line
            self._count("secrets_refused")
            logs.event(
                self.log,
                logging.ERROR,
                "hook not run: its secret environment was refused",
                **fields,
                error=str(exc),
            )
            return HookRun(HookState.ERROR, None, 0.0, 0)
        at = self.clock.wall_ms()
        env = environment(
            r, hook=name, hook_phase=hook_phase, now_ms=at, extra={**hook.env, **secrets}
        )
        replaced = unsafe_characters(raw_variables(r, hook=name, hook_phase=hook_phase, now_ms=at))
        if replaced:  # the whole text is on stdin; the environment holds one safe line
            fields = {**fields, "env_characters_replaced": replaced}
        running = Running()
        with self._lock:
            self._running.add(running)
        try:
            return run(
                hook.argv(),
                env,
                (r.to_json() + "\n").encode("utf-8"),
                hook.timeout,
                log=self.log,
                fields=fields,
                running=running,
                clock=self.clock,
            )
        finally:
            with self._lock:
                self._running.discard(running)
