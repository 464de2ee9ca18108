"""Faults injected into hub transfers: rejections, dropped connections, slow acceptance."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .outcomes import SERVER_BUSY

_THROTTLED = (
    "The request was terminated because the entity is being throttled. "
    "Error code : 50002. Please wait 4 seconds and try again."
)


@dataclass(frozen=True)
class Verdict:
    """What the injected faults decide for one transfer."""

    drop: bool  # close its connection, nothing stored or settled
    reject: tuple[str, str] | None  # reject it with (condition, description)
    delay: float  # settle it only after this many seconds


class Faults:
    """The faults still to apply, used up transfer by transfer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reject: list[tuple[int, str, str]] = []  # remaining, condition, description
        self._drop_next = 0
        self._accept_delay = 0.0

    def reject_next(
        self, n: int = 1, condition: str = SERVER_BUSY, description: str | None = None
    ) -> None:
        """Reject the next ``n`` transfers to a hub (nothing stored) with ``condition``."""
        if description is None:
            description = _THROTTLED if condition == SERVER_BUSY else f"{condition} (injected)"
        with self._lock:
            self._reject.append((n, condition, description))

    def drop_next(self, n: int = 1) -> None:
        """Drop the connection carrying each of the next ``n`` transfers to a hub, before it is
        stored or settled (the client never learns whether it arrived: it did not)."""
        with self._lock:
            self._drop_next += n

    def set_accept_delay(self, seconds: float) -> None:
        """Settle hub transfers only after ``seconds`` (slow acceptance)."""
        with self._lock:
            self._accept_delay = max(0.0, float(seconds))

    def clear(self) -> None:
        with self._lock:
            self._reject.clear()
            self._drop_next = 0
            self._accept_delay = 0.0

    def take(self) -> Verdict:
        """The verdict for the transfer that just arrived (a drop comes before a rejection)."""
        with self._lock:
            drop = self._drop_next > 0
            if drop:
                self._drop_next -= 1
            reject = None
            if not drop and self._reject:
                remaining, cond, desc = self._reject[0]
                reject = (cond, desc)
                if remaining <= 1:
                    self._reject.pop(0)
                else:
                    self._reject[0] = (remaining - 1, cond, desc)
            return Verdict(drop, reject, self._accept_delay)
