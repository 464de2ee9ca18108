"""What the stand-in was sent: the accepted records per stream (optionally appended to a JSON
Lines file), per-stream counters, and the history of answered requests."""

from __future__ import annotations

import collections
import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from se_forwarder.clock import Clock
from se_forwarder.timefmt import format_ms


@dataclass
class StreamStats:
    requests: int = 0  # accepted requests (204)
    records: int = 0
    compressed_bytes: int = 0  # wire bytes of the accepted bodies
    uncompressed_bytes: int = 0
    max_compressed: int = 0  # largest accepted body on the wire
    max_uncompressed: int = 0
    truncated_fields: int = 0


@dataclass(frozen=True)
class RequestLog:
    """One ingestion POST as the stand-in answered it."""

    at: float
    dcr_id: str
    stream: str
    status: int  # 0: connection dropped without an answer
    records: int
    compressed: int
    uncompressed: int
    encoding: str  # Content-Encoding as sent ("" when none)
    subject: str | None
    fault: str | None  # the injected fault that decided the answer, if any
    retry_after: str | None = None


class Records:
    """Accepted records, counters and history; safe to use from the request threads."""

    def __init__(
        self, streams: list[str], records_file: Path | None, ingestion_clock: Clock | None = None
    ) -> None:
        """``ingestion_clock``: each line of ``records_file`` also carries the row's ingestion
        time on it (``_IngestionTime``, what ``ingestion_time()`` returns in Log Analytics and
        in the report)."""
        self.streams = streams
        self.records_file = records_file
        self.ingestion_clock = ingestion_clock
        if ingestion_clock is not None:  # the report's name for it (imported only when asked)
            from se_forwarder.report.kql.shims import INGESTION_COLUMN

            self._ingestion_column = INGESTION_COLUMN
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._records: dict[str, list[dict[str, Any]]] = {s: [] for s in streams}
        self._stats: dict[str, StreamStats] = {s: StreamStats() for s in streams}
        self._history: collections.deque[RequestLog] = collections.deque(maxlen=100_000)
        self._persist: IO[str] | None = None

    def open(self) -> None:
        """Start appending accepted records to ``records_file``, if there is one."""
        if self.records_file is not None:
            self.records_file.parent.mkdir(parents=True, exist_ok=True)
            self._persist = self.records_file.open("a", encoding="utf-8")

    def close(self) -> None:
        with self._lock:
            if self._persist is not None:
                self._persist.close()
                self._persist = None

    def check_stream(self, stream: str) -> None:
        if stream not in self.streams:
            raise KeyError(
                f"stream {stream!r} is not declared (declared: {', '.join(self.streams)})"
            )

    # ------------------------------------------------------------------ writing

    def store(
        self,
        stream: str,
        accepted: list[dict[str, Any]],
        compressed: int,
        uncompressed: int,
        truncated: int,
    ) -> None:
        """Keep the records of one accepted request and count it."""
        with self._changed:
            self._records[stream].extend(accepted)
            s = self._stats[stream]
            s.requests += 1
            s.records += len(accepted)
            s.compressed_bytes += compressed
            s.uncompressed_bytes += uncompressed
            s.max_compressed = max(s.max_compressed, compressed)
            s.max_uncompressed = max(s.max_uncompressed, uncompressed)
            s.truncated_fields += truncated
            if self._persist is not None:
                stamp = (
                    {}
                    if self.ingestion_clock is None
                    else {self._ingestion_column: format_ms(self.ingestion_clock.wall_ms())}
                )
                for rec in accepted:
                    self._persist.write(
                        json.dumps(
                            {"stream": stream, "record": {**rec, **stamp}}, separators=(",", ":")
                        )
                        + "\n"
                    )
                self._persist.flush()
            self._changed.notify_all()

    def log(self, entry: RequestLog) -> None:
        with self._lock:
            self._history.append(entry)

    def reset(self) -> None:
        """Forget accepted records, stats and history."""
        with self._lock:
            for s in self.streams:
                self._records[s] = []
                self._stats[s] = StreamStats()
            self._history.clear()

    # ------------------------------------------------------------------ reading

    def records(self, stream: str) -> list[dict[str, Any]]:
        """A copy of the records accepted on ``stream``, in arrival order."""
        self.check_stream(stream)
        with self._lock:
            return list(self._records[stream])

    def wait_for(self, stream: str, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait until at least ``count`` records were accepted on ``stream``; TimeoutError
        otherwise."""
        self.check_stream(stream)
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self._records[stream]) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"{len(self._records[stream])} of {count} records on {stream} "
                        f"after {timeout} s"
                    )
                self._changed.wait(left)
            return list(self._records[stream])

    def stats(self, stream: str) -> StreamStats:
        self.check_stream(stream)
        with self._lock:
            return StreamStats(**asdict(self._stats[stream]))

    def history(self) -> list[RequestLog]:
        """Every ingestion POST answered so far (the last 100,000), in order."""
        with self._lock:
            return list(self._history)

    def by_stream(self, names: list[str]) -> dict[str, list[dict[str, Any]]]:
        """Copies of the records of several streams, taken at one moment."""
        with self._lock:
            return {n: list(self._records[n]) for n in names}

    def summary(self) -> dict[str, Any]:
        """Per-stream counters, the number of requests and how many got each status."""
        with self._lock:
            return {
                "streams": {n: asdict(s) for n, s in self._stats.items()},
                "requests": len(self._history),
                "answers": dict(collections.Counter(str(r.status) for r in self._history)),
            }
