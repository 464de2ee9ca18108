"""Records as JSON Lines on standard output (for a pipe, a container log, a quick look)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from ... import contract
from ...errors import Verdict
from ..base import BatchLimits, DeliveryError, OutboxRow, SendResult, Sink


class StdoutSink(Sink):
    DEFAULT_LIMITS = BatchLimits(max_records=1000, max_bytes=1_000_000, linger_seconds=0.0)

    def __init__(
        self,
        name: str = "stdout",
        *,
        heartbeats: bool = False,
        limits: BatchLimits | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.name = name
        self.limits = limits or self.DEFAULT_LIMITS
        self.tables = frozenset(
            {contract.RECORDS, contract.HEARTBEATS} if heartbeats else {contract.RECORDS}
        )
        self.stream = stream or sys.stdout

    def send(self, batch: Sequence[OutboxRow]) -> SendResult:
        text = "".join(row.payload + "\n" for row in batch)
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError) as exc:  # a closed pipe: keep the records, try again later
            return SendResult().rest_failed(
                DeliveryError(f"cannot write to standard output: {exc}", Verdict.RETRY)
            )
        return SendResult().plus(len(batch), sum(row.size + 1 for row in batch))

    def reject_reason(self, row: OutboxRow) -> str | None:
        return None

    def close(self) -> None:
        pass
