"""Approvals: the ``StartRequests`` POST, on its own thread and its own IMDS connection.

The poll loop never waits for an approval. Each approval is tried at once, then retried on 410,
429, 5xx and no answer with the IMDS backoff, inside the VM's request budget (the limiter is the
poll loop's), until NotBefore has passed (by then the event starts anyway). A ``200`` commits an
``Approved`` record; a ``400`` (malformed, or an EventId IMDS does not know) is final.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import backoff, logs
from ..clock import SYSTEM, Clock
from ..imds.client import RETRY_STATUSES, ImdsClient, ImdsReply, RateLimiter

if TYPE_CHECKING:
    from ..imds.config import ImdsConfig


def client_for(imds: ImdsConfig, limiter: RateLimiter, clock: Clock) -> Callable[[], ImdsClient]:
    """Approvals' own IMDS connection (``http.client`` is not thread-safe), inside the poll
    loop's request budget (one budget per VM)."""

    def client() -> ImdsClient:
        return ImdsClient(
            imds.endpoint,
            api_version=imds.api_version,
            timeout=imds.timeout,
            first_call_timeout=imds.timeout,
            limiter=limiter,
            clock=clock,
        )

    return client


@dataclass(slots=True)
class ApprovalStats:
    sent: int = 0  # answered 200
    failed: int = 0  # given up: a final refusal, or NotBefore passed while retrying
    attempts: int = 0  # POSTs sent


@dataclass(order=True, slots=True)
class _Pending:
    due: float  # monotonic
    event_id: str = field(compare=False)
    not_before_ms: int = field(compare=False)
    attempt: int = field(default=0, compare=False)


class Approver:
    """``submit`` from any thread; ``on_approved(event_id)`` runs on the approver's thread."""

    def __init__(
        self,
        client: ImdsClient,
        on_approved: Callable[[str], None],
        *,
        still_wanted: Callable[[str], bool],
        stop: threading.Event,
        log: logging.Logger | None = None,
        clock: Clock = SYSTEM,
        on_given_up: Callable[[str, str], None] | None = None,
    ) -> None:
        self.client = client
        self.clock = clock
        self.on_approved = on_approved
        self.on_given_up = on_given_up  # (event_id, why): told to people (a notice)
        self.still_wanted = still_wanted  # False once the event started or was removed
        self.stop_event = stop
        self.log = log or logs.get("actions")
        self.stats = ApprovalStats()
        self._queue: list[_Pending] = []
        self._known: set[str] = set()  # pending or accepted: never asked for twice
        self._lock = threading.Lock()
        self._wake = clock.event()  # the queue changed, or stop
        self._thread = threading.Thread(target=self._run, name="approvals", daemon=True)

    def start(self) -> None:
        self.clock.track(self._thread)
        self._thread.start()

    def submit(self, event_id: str, not_before_ms: int) -> bool:
        """Approve ``event_id`` as soon as the budget allows; False if it was already asked."""
        with self._lock:
            if event_id in self._known:
                return False
            self._known.add(event_id)
            heapq.heappush(self._queue, _Pending(self.clock.monotonic(), event_id, not_before_ms))
        self._wake.set()
        return True

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_event.set()
        self._wake.set()
        self.client.abort()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.client.close()

    # -- the thread -----------------------------------------------------------------------------

    def _next(self) -> _Pending | None:
        while not self.stop_event.is_set():
            self._wake.clear()  # before looking: a submit from now on wakes the wait below
            with self._lock:
                wait = None
                if self._queue:
                    wait = self._queue[0].due - self.clock.monotonic()
                    if wait <= 0:
                        return heapq.heappop(self._queue)
            self.clock.wait(self._wake, wait)
        return None

    def _run(self) -> None:
        while (item := self._next()) is not None:
            try:
                self._attempt(item)
            except Exception as exc:  # never let one approval end the thread
                self.stats.failed += 1
                self.log.error(
                    "approval failed: internal error",
                    exc_info=exc,
                    extra={"fields": {"EventId": item.event_id}},
                )

    def _attempt(self, item: _Pending) -> None:
        eid = item.event_id
        if not self.still_wanted(eid):
            logs.event(
                self.log, logging.INFO, "approval dropped: the event started or ended", EventId=eid
            )
            return
        if self.clock.wall_ms() >= item.not_before_ms:
            self._give_up(eid, "NotBefore has passed", item.attempt - 1)
            return
        self.stats.attempts += 1
        answer = self.client.approve([eid])
        if answer.status == 200:
            self.stats.sent += 1
            logs.event(
                self.log,
                logging.INFO,
                "approval sent",
                EventId=eid,
                attempt=item.attempt + 1,
                latency_ms=round(answer.latency_ms, 3),
            )
            self.on_approved(eid)
            return
        if self.stop_event.is_set():
            return
        if answer.error is None and answer.status not in RETRY_STATUSES:
            self._give_up(eid, f"refused: {answer.describe()}", item.attempt)
            return
        delay = backoff.IMDS.delay(item.attempt)
        if self.clock.wall_ms() + delay * 1000 >= item.not_before_ms:
            self._give_up(
                eid, f"NotBefore has passed; last answer: {answer.describe()}", item.attempt
            )
            return
        logs.event(
            self.log,
            logging.WARNING,
            "approval not accepted yet; will retry",
            EventId=eid,
            answer=_short(answer),
            attempt=item.attempt + 1,
            retry_in=round(delay, 2),
        )
        with self._lock:
            heapq.heappush(
                self._queue,
                _Pending(self.clock.monotonic() + delay, eid, item.not_before_ms, item.attempt + 1),
            )

    def _give_up(self, eid: str, why: str, attempt: int) -> None:
        with self._lock:
            self._known.discard(eid)  # a re-schedule (Updated) may ask again
        self.stats.failed += 1
        logs.event(
            self.log,
            logging.ERROR,
            "approval not sent; the event starts at NotBefore",
            EventId=eid,
            reason=why,
            attempts=attempt + 1,
        )
        if self.on_given_up is not None:
            self.on_given_up(eid, why)


def _short(answer: ImdsReply) -> str:
    return answer.error or f"HTTP {answer.status}"
