"""A hook's state, as the runner ends it and the journal keeps it (never an event's status:
``model.EventStatus.STARTED`` is another word)."""

from __future__ import annotations

from enum import StrEnum


class HookState(StrEnum):
    STARTED = "started"  # claimed in the journal; no result yet (running, or the agent died)
    OK = "ok"
    FAILED = "failed"  # a non-zero exit
    TIMEOUT = "timeout"
    ERROR = "error"  # could not start
    STOPPED = "stopped"  # the agent was stopping
    INTERRUPTED = "interrupted"  # was STARTED when the agent died; reported by the next start
