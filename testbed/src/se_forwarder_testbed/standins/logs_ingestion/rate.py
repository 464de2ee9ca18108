"""The per-DCR rate limits: requests and accepted bytes in a sliding window of one minute."""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Iterable

from .answers import Answer

WINDOW = 60.0


class RateWindows:
    """One window per DCR: an entry [time, bytes] per request that reached the rate check."""

    def __init__(self, dcr_ids: Iterable[str]) -> None:
        self._lock = threading.Lock()
        self._windows: dict[str, collections.deque[list[float]]] = {
            d: collections.deque() for d in dcr_ids
        }
        self._bytes: dict[str, int] = dict.fromkeys(self._windows, 0)

    def admit(self, dcr_id: str, requests_per_minute: int, bytes_per_minute: int) -> list[float]:
        """Count a request against ``dcr_id`` and return its window entry; a 429 when the DCR
        is over either limit."""
        now = time.monotonic()
        with self._lock:
            window = self._windows[dcr_id]
            while window and window[0][0] <= now - WINDOW:
                self._bytes[dcr_id] -= int(window.popleft()[1])
            if len(window) >= requests_per_minute or self._bytes[dcr_id] >= bytes_per_minute:
                wait = max(1, math.ceil(window[0][0] + WINDOW - now))
                raise Answer(
                    429,
                    "TooManyRequests",
                    f"Data collection rule '{dcr_id}' is over its limit of "
                    f"{requests_per_minute} requests or {bytes_per_minute} bytes "
                    f"per minute. Retry after {wait} seconds.",
                    {"Retry-After": str(wait)},
                )
            entry = [now, 0]  # the request counts now; its bytes once accepted
            window.append(entry)
            return entry

    def count_bytes(self, dcr_id: str, entry: list[float], size: int) -> None:
        """An admitted request was accepted: its ``size`` counts against the volume limit."""
        with self._lock:
            entry[1] = size
            self._bytes[dcr_id] += size

    def reset(self) -> None:
        with self._lock:
            for d, window in self._windows.items():
                window.clear()
                self._bytes[d] = 0
