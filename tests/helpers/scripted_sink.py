"""An in-memory sink that answers from a script: the worker's retry, split, partial-delivery and
dead-letter logic exercised with no TLS, no SDK and no network.

Each ``send`` takes the next step of the script (or ``default`` when the script is exhausted):

* ``None``: every row is confirmed;
* a ``DeliveryError``: nothing delivered, returned as the result's failure (as every sink does);
* any other exception instance: raised as it is (a bug in a sink: a ``TypeError``…);
* a callable ``step(batch) -> SendResult | DeliveryError | None``: a failure of its own
  (``refuse(seq)`` below) or a result of its own (``partial(n)``: a prefix delivered, a failure
  for the rest).

Every attempt is recorded (``attempts``: the seqs of each batch tried), and the confirmed rows
(``delivered``) in order, so a test reads exactly what the service would have received.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

from se_forwarder import contract
from se_forwarder.errors import DeliveryError, Verdict
from se_forwarder.outbox import OutboxRow
from se_forwarder.sinks.base import SendResult, Sink
from se_forwarder.sinks.batching import BatchLimits

Step = None | BaseException | Callable[[Sequence[OutboxRow]], SendResult | DeliveryError | None]


def fails(
    verdict: Verdict, message: str = "scripted", retry_after: float | None = None
) -> DeliveryError:
    return DeliveryError(f"{message} ({verdict})", verdict, retry_after=retry_after)


QUICK = BatchLimits(max_records=100, max_bytes=100_000, linger_seconds=0.0)


class ScriptedSink(Sink):
    def __init__(
        self,
        script: Iterable[Step] = (),
        *,
        name: str = "scripted",
        limits: BatchLimits = QUICK,
        tables: frozenset[str] = frozenset(contract.tables()),
        default: Step = None,
        reject: Callable[[OutboxRow], str | None] | None = None,
    ):
        self.name = name
        self.limits = limits
        self.tables = tables
        self.script = list(script)
        self.default = default
        self._reject = reject
        self.attempts: list[list[int]] = []
        self.delivered: list[OutboxRow] = []
        self.closed = False
        self._lock = threading.Lock()

    def send(self, batch: Sequence[OutboxRow]) -> SendResult:
        with self._lock:
            self.attempts.append([r.seq for r in batch])
            step = self.script.pop(0) if self.script else self.default
        if isinstance(step, BaseException) and not isinstance(step, DeliveryError):
            raise step
        result = step if isinstance(step, DeliveryError) else step(batch) if step else None
        if isinstance(result, DeliveryError):
            result = SendResult(failure=result)
        if result is None:
            result = SendResult(delivered=len(batch), requests=1)
        with self._lock:
            self.delivered.extend(batch[: result.delivered])
        return result

    def reject_reason(self, row: OutboxRow) -> str | None:
        return self._reject(row) if self._reject else None

    def close(self) -> None:
        self.closed = True


def refuse(
    seq: int, verdict: Verdict = Verdict.REJECT
) -> Callable[[Sequence[OutboxRow]], DeliveryError | None]:
    """A step that refuses any batch holding ``seq`` (as a 400 for one bad record would)."""

    def step(batch: Sequence[OutboxRow]) -> DeliveryError | None:
        if any(r.seq == seq for r in batch):
            return fails(verdict, f"record seq {seq} refused")
        return None

    return step


def too_large_over(n: int) -> Callable[[Sequence[OutboxRow]], DeliveryError | None]:
    """A step that refuses batches of more than ``n`` rows as too large (413)."""

    def step(batch: Sequence[OutboxRow]) -> DeliveryError | None:
        if len(batch) > n:
            return fails(Verdict.SPLIT, f"{len(batch)} rows is over {n}")
        return None

    return step


def partial(
    done: int, cause: DeliveryError | None = None
) -> Callable[[Sequence[OutboxRow]], SendResult]:
    """A step that confirms the first ``done`` rows of the batch, then fails with ``cause``."""

    def step(batch: Sequence[OutboxRow]) -> SendResult:
        return SendResult(
            delivered=done, requests=1, failure=cause or fails(Verdict.RETRY, "link dropped")
        )

    return step


def rows(
    n: int, *, start: int = 1, table: str = contract.RECORDS, size: int = 60
) -> list[OutboxRow]:
    """``n`` outbox rows (uncommitted: ``seq`` 0) with recognisable payloads."""
    out = []
    for i in range(start, start + n):
        pad = "x" * max(0, size - 30)
        payload = f'{{"RecordId":"r{i}","pad":"{pad}"}}'
        out.append(OutboxRow.raw(table, "vm-1", payload))
    return out


def record_ids(delivered: Sequence[OutboxRow]) -> list[str]:
    import json

    return [json.loads(r.payload)["RecordId"] for r in delivered]
