"""``dead-letter.jsonl``: rows a sink can never accept, each with the reason (never a transient
answer: the worker dead-letters only what no retry can fix).

A dead letter is a loss a person must look at, so ``status`` fails (exit 1, ``DEAD LETTERS``)
while the file holds lines nobody acknowledged; ``status --ack-dead-letters`` records, in
``dead-letter.ack`` beside it, each file's inode and how far it was read (later lines count
again; a file removed or replaced starts again at 0).

Bounded, so a sink that dead-letters forever cannot fill the disk: a line that would take the
file past ``max_bytes`` first moves it to ``dead-letter.jsonl.1`` (the previous file), so the two
hold at most twice the bound (a single line larger than the bound is written alone). The lines of
a previous file replaced that way are gone: counted (``dropped`` since start, and through
``counted`` in the outbox's ``counter:dead_letters_dropped``, so status.json's
``dead_letters_dropped`` and the heartbeat's ``DeadLettersDropped`` still show them after a kill -9
before the next heartbeat) and logged once per run for each kind of occurrence (the first move,
the first lines dropped), never per record."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import logs
from ..clock import SYSTEM, Clock
from ..oshost import files
from ..outbox import OutboxRow

DEFAULT_MAX_BYTES = 16 * 1024 * 1024  # per file: dead-letter.jsonl and dead-letter.jsonl.1
PREVIOUS_SUFFIX = ".1"


def previous_path(path: Path) -> Path:
    """Where ``path`` moves when it reaches its bound (``dead-letter.jsonl.1``)."""
    return path.with_name(path.name + PREVIOUS_SUFFIX)


class DeadLetters:
    def __init__(
        self,
        path: Path,
        clock: Clock = SYSTEM,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        logger: logging.Logger | None = None,
        counted: Callable[[int], None] = lambda lines: None,
    ) -> None:
        self.path = path
        self.clock = clock
        self.max_bytes = max_bytes
        self.dropped = 0  # lines removed with a previous file replaced (since start)
        self.counted = counted  # persists each drop as it happens (the outbox's counter)
        self.log = logger or logs.get("delivery")
        self._logged: set[str] = set()  # the kinds of occurrence logged this run
        self._lock = threading.Lock()

    def write(self, sink: str, reason: str, rows: Sequence[OutboxRow]) -> None:
        entries = []
        for row in rows:
            try:
                record = json.loads(row.payload)
            except ValueError:
                record = row.payload
            entries.append(
                {
                    "sink": sink,
                    "reason": reason,
                    "table": row.table,
                    "seq": row.seq,
                    "record": record,
                }
            )
        self.append(entries)

    def append(self, entries: Sequence[dict[str, Any]]) -> None:
        """One line per entry, each with the time first, within the bound."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock.wall_seconds()))
        lines = [
            (json.dumps({"time": now, **e}, separators=(",", ":")) + "\n").encode("utf-8")
            for e in entries
        ]
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = files.open_own(self.path, files.APPEND, 0o600)
            try:
                size = os.fstat(fd).st_size
                pending: list[bytes] = []
                for line in lines:
                    if size and size + len(line) > self.max_bytes:
                        os.write(fd, b"".join(pending))
                        pending = []
                        os.close(fd)
                        fd = -1
                        self._move_to_previous()
                        fd = files.open_own(self.path, files.APPEND, 0o600)
                        size = 0
                    pending.append(line)
                    size += len(line)
                os.write(fd, b"".join(pending))
            finally:
                if fd >= 0:
                    os.close(fd)

    def _move_to_previous(self) -> None:
        """The file at its bound becomes the previous one; the lines of the one it replaces are
        counted as dropped."""
        previous = previous_path(self.path)
        lines = _count_lines(previous)
        os.replace(self.path, previous)
        self._once(
            "moved",
            logging.WARNING,
            "dead-letter file at its bound: moved to the previous file, a new one started",
            file=str(self.path),
            previous=str(previous),
            max_bytes=self.max_bytes,
        )
        if lines:
            self.dropped += lines
            self.counted(lines)
            self._once(
                "dropped",
                logging.ERROR,
                "dead-letter lines dropped: the previous file "
                "was replaced to keep the dead letters within their bound (counted in "
                "status as dead_letters_dropped)",
                lines=lines,
                file=str(previous),
                max_bytes=self.max_bytes,
            )

    def _once(self, kind: str, level: int, message: str, **fields: object) -> None:
        if kind not in self._logged:
            self._logged.add(kind)
            logs.event(self.log, level, message, **fields)


def _count_lines(path: Path) -> int:
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return 0
    with f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(_CHUNK), b""))


# -- reading and acknowledging them (``se-forwarder status``) ---------------------------------

ACK_SUFFIX = ".ack"  # dead-letter.jsonl -> dead-letter.ack: how far a person has read it
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Backlog:
    """``dead-letter.jsonl`` and its previous file as ``status`` sees them: whole lines written,
    and how many of them were acknowledged (``status --ack-dead-letters``)."""

    records: int
    acknowledged: int
    size: int  # bytes of whole lines (dead-letter.jsonl's)
    inode: int  # dead-letter.jsonl's
    marks: tuple[tuple[int, int], ...] = ()  # (inode, bytes of whole lines) of each file read

    @property
    def pending(self) -> int:
        return self.records - self.acknowledged


def ack_path(path: Path) -> Path:
    return path.with_suffix(ACK_SUFFIX)


def backlog(path: Path) -> Backlog | None:
    """The dead letters in ``path`` and its previous file (None: there is no ``path``). An
    acknowledgement counts only for the same file (inode) and at most its size: a file removed
    or replaced after it was read starts again at 0 (a file moved to the previous one keeps its
    inode, so what was read of it stays read). OSError when a file exists but cannot be read."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    read = _acknowledged(_read_ack(ack_path(path)))
    records = acked = 0
    marks = []
    for p in (previous_path(path), path):
        counted = _count(p, read)
        if counted is not None:
            records += counted[0]
            acked += counted[1]
            marks.append((counted[3], counted[2]))
    size = marks[-1][1] if marks and marks[-1][0] == st.st_ino else 0
    return Backlog(records, acked, size, st.st_ino, tuple(marks))


def _count(path: Path, read: dict[int, int]) -> tuple[int, int, int, int] | None:
    """(lines, lines acknowledged, bytes of whole lines, inode) of one file; None: no file."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return None
    with f:
        st = os.fstat(f.fileno())
        offset = read.get(st.st_ino, 0)
        if not 0 <= offset <= st.st_size:
            offset = 0
        before = total = whole = pos = 0  # whole: bytes up to the end of the last whole line
        while pos < st.st_size and (chunk := f.read(min(_CHUNK, st.st_size - pos))):
            total += chunk.count(b"\n")
            if pos < offset:
                before += chunk[: offset - pos].count(b"\n")
            if (last := chunk.rfind(b"\n")) >= 0:
                whole = pos + last + 1
            pos += len(chunk)
    return total, before, whole, st.st_ino


def acknowledge(path: Path, clock: Clock = SYSTEM) -> Backlog | None:
    """Record every whole line of ``path`` and its previous file as read (atomically, mode
    0600); what they hold now."""
    now = backlog(path)
    if now is None:
        return None
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock.wall_seconds()))
    data = json.dumps(
        {
            "inode": now.inode,
            "offset": now.size,
            "total": now.records,
            "at": at,
            "files": [{"inode": i, "offset": o} for i, o in now.marks],
        }
    )
    target = ack_path(path)
    files.replace(target, data.encode(), 0o600)  # root runs this: never through a link
    return Backlog(now.records, now.records, now.size, now.inode, now.marks)


def _acknowledged(ack: dict[str, Any]) -> dict[int, int]:
    """inode -> bytes read, from an acknowledgement (one file's, as written before the bound)."""
    entries = ack.get("files")
    if not isinstance(entries, list):
        entries = [ack]
    return {
        e["inode"]: e["offset"]
        for e in entries
        if isinstance(e, dict)
        and isinstance(e.get("inode"), int)
        and isinstance(e.get("offset"), int)
    }


def _read_ack(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
