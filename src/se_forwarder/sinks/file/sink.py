"""Records as JSON Lines in a local file, rotated by size (``path``, ``path.1`` … ``path.N``).

A batch counts as delivered once it is written and fsynced: the file is as durable as the
outbox it drains.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ... import contract
from ...errors import Verdict
from ...oshost import files
from ..base import BatchLimits, DeliveryError, OutboxRow, SendResult, Sink


class _RotatingFile:
    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups

    def append(self, lines: list[bytes]) -> None:
        """Append whole lines, rotating before a line that would take the file past the limit
        (a single line longer than the limit gets a file of its own), then fsync."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            size = os.lstat(self.path).st_size
        except FileNotFoundError:
            size = 0
        chunk: list[bytes] = []
        for line in lines:
            if size and size + len(line) > self.max_bytes:
                self._write(b"".join(chunk))
                chunk = []
                self._rotate()
                size = 0
            chunk.append(line)
            size += len(line)
        self._write(b"".join(chunk))

    def _write(self, data: bytes) -> None:
        if not data:
            return
        fd = files.open_own(self.path, files.APPEND, 0o640)  # never through a planted link
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    def _rotate(self) -> None:
        if self.backups == 0:
            self.path.unlink(missing_ok=True)
            return
        for i in range(self.backups - 1, 0, -1):
            src = self.path.with_name(f"{self.path.name}.{i}")
            if src.exists():
                os.replace(src, self.path.with_name(f"{self.path.name}.{i + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))


class FileSink(Sink):
    DEFAULT_LIMITS = BatchLimits(max_records=1000, max_bytes=1_000_000, linger_seconds=0.0)

    def __init__(
        self,
        path: str | Path,
        *,
        name: str = "file",
        heartbeat_path: str | Path | None = None,
        platform_path: str | Path | None = None,
        max_file_bytes: int = 10 * 1024 * 1024,
        backups: int = 5,
        limits: BatchLimits | None = None,
    ) -> None:
        self.name = name
        self.limits = limits or self.DEFAULT_LIMITS
        self._files = {contract.RECORDS: _RotatingFile(Path(path), max_file_bytes, backups)}
        for table, other in (
            (contract.HEARTBEATS, heartbeat_path),
            (contract.PLATFORM, platform_path),
        ):
            if other:
                self._files[table] = _RotatingFile(Path(other), max_file_bytes, backups)
        self.tables = frozenset(self._files)

    def send(self, batch: Sequence[OutboxRow]) -> SendResult:
        by_file: dict[str, list[bytes]] = {}
        for row in batch:
            by_file.setdefault(row.table, []).append((row.payload + "\n").encode("utf-8"))
        try:
            for table, lines in by_file.items():
                self._files[table].append(lines)
        except OSError as exc:  # full disk, permissions: keep the records in the outbox
            return SendResult().rest_failed(
                DeliveryError(
                    f"cannot write {exc.filename or 'file'}: {exc.strerror}", Verdict.RETRY
                )
            )
        return SendResult().plus(len(batch), sum(row.size + 1 for row in batch))

    def reject_reason(self, row: OutboxRow) -> str | None:
        return None

    def close(self) -> None:
        pass
