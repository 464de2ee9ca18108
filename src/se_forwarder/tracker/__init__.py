"""The lifecycle tracker: a pure state machine (no I/O, no clock) and its state codec."""

from .codec import state_from_json, state_to_json
from .machine import (
    CANCEL_WINDOW_MS,
    Observed,
    TrackedEvent,
    TrackerState,
    acted,
    approved,
    emitted,
    latest_ms,
    observe,
    restarted,
    shifted,
    view_record,
)

__all__ = [
    "CANCEL_WINDOW_MS",
    "Observed",
    "TrackedEvent",
    "TrackerState",
    "acted",
    "approved",
    "emitted",
    "latest_ms",
    "observe",
    "restarted",
    "shifted",
    "state_from_json",
    "state_to_json",
    "view_record",
]
