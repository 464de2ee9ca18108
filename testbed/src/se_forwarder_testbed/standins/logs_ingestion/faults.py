"""Faults injected into the next ingestion POSTs, in order, one request each: an error status,
a late answer, or a dropped connection."""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

from .answers import Answer, www_authenticate

STATUS_CODES = {
    400: "BadRequest",
    401: "InvalidToken",
    403: "OperationFailed",
    404: "NotFound",
    408: "RequestTimeout",
    413: "ContentLengthLimitExceeded",
    429: "TooManyRequests",
    500: "InternalServerError",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "GatewayTimeout",
}


def fmt_seconds(value: float | str) -> str:
    """A ``Retry-After`` value: whole seconds without a decimal point."""
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else repr(float(value))


@dataclass
class Fault:
    kind: str  # "status", "delay", "drop"
    status: int = 0
    retry_after: str | None = None
    code: str | None = None
    message: str | None = None
    delay: float = 0.0
    remaining: int | None = 1  # None: until cleared

    @property
    def name(self) -> str:
        """How the request history names the fault."""
        if self.kind == "status":
            return f"status {self.status}"
        return f"delay {self.delay}s" if self.kind == "delay" else self.kind

    def answer(self) -> Answer:
        """The answer a status fault gives."""
        headers = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
        if self.status == 401:
            headers["WWW-Authenticate"] = www_authenticate("injected fault")
        return Answer(
            self.status,
            self.code or STATUS_CODES.get(self.status, "Error"),
            self.message or f"Injected fault: {self.status}.",
            headers,
        )


class Faults:
    """The faults still to apply; ``count=None`` means every request until cleared."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: collections.deque[Fault] = collections.deque()

    def fail(
        self,
        count: int | None,
        status: int,
        retry_after: float | str | None,
        code: str | None,
        message: str | None,
    ) -> None:
        ra = None if retry_after is None else fmt_seconds(retry_after)
        self._add(
            Fault(
                "status", status=status, retry_after=ra, code=code, message=message, remaining=count
            )
        )

    def delay(self, count: int | None, seconds: float) -> None:
        self._add(Fault("delay", delay=seconds, remaining=count))

    def drop(self, count: int | None) -> None:
        self._add(Fault("drop", remaining=count))

    def _add(self, fault: Fault) -> None:
        if fault.remaining is not None and fault.remaining < 1:
            raise ValueError("count must be at least 1 (or None for every request until cleared)")
        with self._lock:
            self._faults.append(fault)

    def take(self) -> Fault | None:
        """The fault for the request that just arrived, if any (used up by it)."""
        with self._lock:
            if not self._faults:
                return None
            fault = self._faults[0]
            if fault.remaining is not None:
                fault.remaining -= 1
                if fault.remaining == 0:
                    self._faults.popleft()
            return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()
