"""Per event, what the policy did: the rule the event is bound to, and what it got.

Rules match events, not records: the first rule that acts on an event (on its ``FirstSeen``, or
on the ``Updated`` or ``Removed`` that first makes one match) is bound to it in the state
database, and decides every later record of that event, after a restart too. So a ``Removed``
that another rule would match (it was last seen ``Started``) never runs that rule's hooks after
it.

What the event got (its rule, each hook and how it ended, the approval and by whom) is one line:
``status`` lists the recent ones, and the records of the event carry it in ``Acted`` from the
moment there is something to say (``on_change``: the recorder keeps it with the event).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .. import logs
from ..hooks import Journal
from ..hooks.states import HookState
from ..model import LifecycleRecord
from ..policy import Decision, Policy

KEEP_LINES = 20  # events status.json lists (the latest)
_STATE_WORDS: dict[str, str] = {
    HookState.OK: "ok",
    HookState.FAILED: "failed",
    HookState.TIMEOUT: "timed out",
    HookState.ERROR: "could not start",
    HookState.INTERRUPTED: "interrupted",
    HookState.STOPPED: "killed at a stop",
}


@dataclass(slots=True)
class Got:
    """What one event got from this VM's policy."""

    event_id: str
    event_type: str
    rule: str  # "rule 2 \"drain before reboots\""
    steps: dict[str, str] = field(default_factory=dict)  # "drain" -> "ok", "after: x" -> ...
    approval: str = ""  # "approved by this VM", "approval given up (...)", "not approved: ..."

    def text(self) -> str:
        """``rule 1 "drain": drain ok, approved by this VM; after it: uncordon ok``"""
        before = [f"{k} {v}" for k, v in self.steps.items() if not k.startswith("after: ")]
        after = [f"{k[7:]} {v}" for k, v in self.steps.items() if k.startswith("after: ")]
        parts = [", ".join([*before, *([self.approval] if self.approval else [])])]
        if after:
            parts.append("after it: " + ", ".join(after))
        body = "; ".join(p for p in parts if p)
        return f"{self.rule}: {body}" if body else self.rule

    def line(self) -> str:
        return f"{self.event_id[:8]} {self.event_type}: {self.text()}"


class Book:
    def __init__(
        self,
        policy: Policy,
        journal: Journal,
        log: logging.Logger,
        on_change: Callable[[str, str], None] | None = None,
    ) -> None:
        self.policy, self.journal, self.log = policy, journal, log
        self.on_change = on_change  # (EventId, the event's line without its id)
        self._lock = threading.Lock()
        self._rules: dict[str, int | None] = {}  # EventId -> bound rule (None: looked, none)
        self._got: dict[str, Got] = {}  # in the order the events were bound

    # -- the rule -----------------------------------------------------------------------------

    def decide(self, r: LifecycleRecord, at_ms: int) -> Decision:
        """The event's decision for this record: by its bound rule, or the first rule that
        matches and acts here (then bound to the event from now on)."""
        number = self._bound(r)
        if number is not None:
            return self.policy.decide(r, bound=number)
        d = self.policy.decide(r)
        if d.rule is not None and d.number is not None and d.acts_here and d.rule.acts:
            self._bind(r, d, at_ms)
        return d

    def _bound(self, r: LifecycleRecord) -> int | None:
        eid = r.EventId
        with self._lock:
            if eid in self._rules:
                return self._rules[eid]
        try:
            saved = self.journal.bound(eid)
        except Exception as exc:
            logs.event(self.log, logging.WARNING, "cannot read an event's rule", error=str(exc))
            return None
        number = None if saved is None else self.policy.number_of(*saved)
        if saved is not None and number is None:
            logs.event(
                self.log,
                logging.WARNING,
                "the rule this event was bound to has changed since; the event is decided anew",
                EventId=eid,
                rule=saved[0],
            )
        with self._lock:
            self._rules[eid] = number
            if number is not None:  # a restart: what it got so far is in the journal
                self._keep(Got(eid, r.EventType, self.policy.decide(r, bound=number).label))
        return number

    def _keep(self, got: Got) -> None:
        self._got.setdefault(got.event_id, got)
        while len(self._got) > KEEP_LINES:
            self._got.pop(next(iter(self._got)))

    def _bind(self, r: LifecycleRecord, d: Decision, at_ms: int) -> None:
        assert d.number is not None
        try:
            self.journal.bind(r.EventId, d.number, self.policy.print_of(d.number), at_ms)
        except Exception as exc:  # kept in memory: this run still decides per event
            logs.event(self.log, logging.WARNING, "cannot save an event's rule", error=str(exc))
        with self._lock:
            self._rules[r.EventId] = d.number
            self._keep(Got(r.EventId, r.EventType, d.label))
        logs.event(self.log, logging.INFO, "event bound to a rule", EventId=r.EventId, rule=d.label)
        self._changed(r.EventId)

    # -- what it got --------------------------------------------------------------------------

    def hook(self, eid: str, name: str, post: bool, state: str) -> None:
        self._step(eid, ("after: " if post else "") + name, _STATE_WORDS.get(state, state))

    def would(self, eid: str, name: str, post: bool) -> None:
        self._step(eid, ("after: " if post else "") + name, "would run (dry run)")

    def running(self, eid: str, name: str, post: bool) -> None:
        self._step(eid, ("after: " if post else "") + name, "running", tell=False)

    def approval(self, eid: str, words: str) -> None:
        with self._lock:
            got = self._got.get(eid)
            if got is None or got.approval == words:
                return
            got.approval = words
        self._changed(eid)

    def would_read(self, eid: str, approval: str) -> str | None:
        """The event's line once its approval reads ``approval`` (None: not bound here)."""
        with self._lock:
            got = self._got.get(eid)
            return (
                None
                if got is None
                else replace(got, steps=dict(got.steps), approval=approval).text()
            )

    def _step(self, eid: str, key: str, words: str, *, tell: bool = True) -> None:
        with self._lock:
            got = self._got.get(eid)
            if got is None:
                return
            got.steps[key] = words
        if tell:
            self._changed(eid)

    def _changed(self, eid: str) -> None:
        with self._lock:
            got = self._got.get(eid)
            text = got.text() if got else None
        if text is not None and self.on_change is not None:
            try:
                self.on_change(eid, text)
            except Exception as exc:
                logs.event(
                    self.log,
                    logging.WARNING,
                    "cannot keep what the event got with its records",
                    EventId=eid,
                    error=str(exc),
                )

    def lines(self) -> tuple[str, ...]:
        """One line per recent event the policy acted on (``status``)."""
        with self._lock:
            return tuple(g.line() for g in self._got.values())
