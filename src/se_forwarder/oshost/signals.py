"""Stop requests, in one place: SIGTERM (systemd), SIGINT (a terminal), SIGBREAK (a Windows
console or service). The agent and the long-running helper commands all stop the same way."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

from .. import logs
from ..clock import SYSTEM


def stop_signals() -> tuple[int, ...]:
    sigs = [signal.SIGTERM, signal.SIGINT]
    if hasattr(signal, "SIGBREAK"):
        sigs.append(signal.SIGBREAK)
    return tuple(sigs)


# what ``signal.signal`` takes and gives back
Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def install(on_stop: Callable[[], None]) -> dict[int, Handler]:
    """Call ``on_stop`` (from the main thread) on a stop signal; returns the previous handlers."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        logs.event(logs.get(), logging.INFO, "stop requested", signal=signal.Signals(signum).name)
        on_stop()

    return {sig: signal.signal(sig, handler) for sig in stop_signals()}


def restore(previous: dict[int, Handler]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def wait_for_stop(ready: Callable[[], None] = lambda: None) -> None:
    """Block until a stop signal arrives (the helper commands' main loop). ``ready()`` (what
    tells the caller the command is up: its address printed) runs once the signals are caught, so
    a stop sent as soon as it is read ends the command cleanly, not by the signal's default."""
    stop = SYSTEM.event()
    previous = install(stop.set)
    try:
        ready()
        while not SYSTEM.wait(stop, 0.5):  # short waits: signal handlers run between them
            pass
    finally:
        restore(previous)
