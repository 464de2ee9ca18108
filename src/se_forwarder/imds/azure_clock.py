"""Azure's clock, as the ``Date`` header of IMDS's answers tells it.

``NoticeSeconds`` and ``StartDelaySeconds`` compare Azure's ``NotBefore`` with the time of a
poll. On a VM whose wall clock is off (stepped by hand, a broken time sync) they would be off by
as much (an hour ahead: a notice of 20 minutes read as -40), although every IMDS answer says what
time Azure thinks it is. The header has whole seconds, so one answer places Azure's clock within a
second: the skew is the median of the last answers' (their second's middle minus the VM's time),
and it is applied to those comparisons only when it is at least ``APPLY_MS``, beyond what the
header's resolution and the answer's latency can explain. Every row's ``TimeGenerated`` stays the
VM's clock, as the contract says; the skew is shown in ``status`` and the heartbeat
(``ClockSkewSeconds``).
"""

from __future__ import annotations

from collections import deque

from ..timefmt import parse_http_date_ms

APPLY_MS = 2000  # a smaller skew is within what a whole-second Date can tell
SAMPLES = 15  # answers the skew is the median of: one odd answer does not move it


class AzureClock:
    """Not thread-safe: the poll loop's (the recorder's lock) alone."""

    def __init__(self) -> None:
        self._samples: deque[int] = deque(maxlen=SAMPLES)
        self._date: bytes | None = None
        self._date_ms = 0

    def heard(self, date: bytes | None, local_ms: int) -> None:
        """An answer received at ``local_ms`` (the VM's clock) carried ``date``."""
        if not date:
            return
        if date != self._date:
            try:
                self._date_ms = parse_http_date_ms(date.decode("ascii"))
            except (ValueError, UnicodeDecodeError):
                return  # not a date: no sample (the answer itself is judged elsewhere)
            self._date = date
        self._samples.append(self._date_ms + 500 - local_ms)

    def stepped(self, delta_ms: int) -> None:
        """The VM's wall clock stepped by ``delta_ms``: the samples taken before follow it."""
        self._samples = deque((s - delta_ms for s in self._samples), maxlen=SAMPLES)

    @property
    def skew_ms(self) -> int | None:
        """Azure's clock minus the VM's (positive: the VM's is behind); None before a Date."""
        return _median(self._samples) if self._samples else None

    @property
    def offset_ms(self) -> int:
        """What to add to the VM's time to compare it with Azure's times: the skew when it is
        beyond the header's resolution, else 0 (the VM's clock is taken as right)."""
        skew = self.skew_ms
        return skew if skew is not None and abs(skew) >= APPLY_MS else 0

    @property
    def skew_seconds(self) -> float | None:
        skew = self.skew_ms
        return None if skew is None else round(skew / 1000, 1)


def _median(samples: deque[int]) -> int:
    """``int(statistics.median(samples))``, without importing ``statistics`` (and its C part)
    into every agent for one median of at most ``SAMPLES`` integers."""
    ordered = sorted(samples)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return int((ordered[middle - 1] + ordered[middle]) / 2)
