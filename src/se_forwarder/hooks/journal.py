"""At most once per (EventId, hook, phase), remembered in the state database.

A hook is *claimed* (a durable commit) before its process starts, and its result saved when it
ends. After a restart, even one by ``kill -9``, a claimed hook never runs again: ``ok`` lets the
approval that follows it go ahead; ``started`` without a result means the agent died while it
ran, which counts as a failure (nothing is known about what it did). The restart that finds it
records it as ``interrupted``, so it is reported and counted once, not at every later restart.

It also keeps which rule each event is bound to (``bind``): the rule that decided its first
action decides the rest of it, after a restart too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..outbox import Store
from .states import HookState

PREFIX = "hook|"
RULE_PREFIX = "rule|"  # EventId -> the rule it is bound to
KEEP_MS = 8 * 86_400_000  # results of events no longer open are forgotten after this


@dataclass(frozen=True, slots=True)
class Entry:
    state: str  # a HookState's value (as read back: it may be one an older agent wrote)
    at_ms: int
    exit_code: int | None = None

    @classmethod
    def of(cls, value: dict[str, Any]) -> Entry:
        return cls(str(value.get("state")), int(value.get("at", 0)), value.get("exit"))


class Journal:
    def __init__(self, store: Store) -> None:
        self.store = store

    @staticmethod
    def key(event_id: str, phase: str, hook: str) -> str:
        return f"{PREFIX}{event_id}|{phase}|{hook}"

    def claim(self, event_id: str, phase: str, hook: str, at_ms: int) -> bool:
        """True if this call claimed the hook (it has never run); raises if the store cannot
        be written (the hook must not run then: at most once could not be kept)."""
        return self.store.claim(
            self.key(event_id, phase, hook), {"state": HookState.STARTED, "at": at_ms}
        )

    def finish(
        self, event_id: str, phase: str, hook: str, state: str, at_ms: int, exit_code: int | None
    ) -> None:
        self.store.save(
            self.key(event_id, phase, hook), {"state": state, "at": at_ms, "exit": exit_code}
        )

    def interrupted(self, event_id: str, phase: str, hook: str, entry: Entry) -> None:
        """The hook claimed in ``entry`` ran when the agent died: its result will never come."""
        self.finish(event_id, phase, hook, HookState.INTERRUPTED, entry.at_ms, None)

    def bind(self, event_id: str, number: int, printed: str, at_ms: int) -> None:
        """Bind the event to rule ``number`` (``printed``: what the rule was, so a changed rule
        is not taken for it after a restart)."""
        self.store.save(f"{RULE_PREFIX}{event_id}", {"rule": number, "print": printed, "at": at_ms})

    def bound(self, event_id: str) -> tuple[int, str] | None:
        value = self.store.load(f"{RULE_PREFIX}{event_id}")
        if not isinstance(value, dict) or not isinstance(value.get("rule"), int):
            return None
        return value["rule"], str(value.get("print", ""))

    def ran(self, event_id: str, phase: str, hooks: tuple[str, ...]) -> bool:
        """Whether any of ``hooks`` was started for the event (whatever its result)."""
        return any(self.get(event_id, phase, h) is not None for h in hooks)

    def get(self, event_id: str, phase: str, hook: str) -> Entry | None:
        value = self.store.load(self.key(event_id, phase, hook))
        return Entry.of(value) if isinstance(value, dict) else None

    def prune(self, open_ids: set[str], now_ms: int) -> int:
        """Forget the entries of events no longer open, once older than ``KEEP_MS``."""
        entries = {**self.store.scan(PREFIX), **self.store.scan(RULE_PREFIX)}
        old = [
            k
            for k, v in entries.items()
            if k.split("|")[1] not in open_ids
            and isinstance(v, dict)
            and now_ms - int(v.get("at", 0)) > KEEP_MS
        ]
        if old:
            self.store.forget(old)
        return len(old)
