"""The state database's disk space: a bounded write-ahead log, and freed pages given back.

SQLite never shrinks its files by itself: a write-ahead log keeps the size of the largest
transaction it ever held, and the pages of delivered or dropped rows stay in the database file
as free pages. So the log is capped (``journal_size_limit``: cut back to it whenever it restarts)
and truncated after each compaction (``wal_checkpoint(TRUNCATE)``), and the database runs with
``auto_vacuum = INCREMENTAL``: ``compact`` hands free pages back to the file system a few
megabytes at a time, between polls, so the poll loop is never held up for long. A database made
by an older agent (``auto_vacuum = NONE``) is converted once, with a ``VACUUM``, when opened.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import logs

WAL_LIMIT_BYTES = 4 * 1024 * 1024  # the log is cut back to this whenever it restarts
MIN_WAL_BYTES = 64 * 1024  # however small the bound
SHM_BYTES = 32 * 1024  # the WAL index (state.db-shm) for a log of a few thousand pages
# Below this bound the files cannot fit in it whatever is dropped (a database's own pages, the
# log's least): the bound then counts the rows' bytes only.
MIN_DISK_BOUND = 1024 * 1024
STEP_PAGES = 1024  # pages handed back per step (4 MB with 4 KB pages): one step is ~0.1 s
MAX_STEPS = 4  # steps per compaction: the poll loop waits at most this many steps
SLACK_PAGES = 256  # free pages kept for the next rows (1 MB): no churn on an idle spool
INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL


@dataclass(frozen=True, slots=True)
class Compaction:
    freed_pages: int  # handed back to the file system
    free_pages: int  # still free in the file after this compaction
    wal_truncated: bool


def prepare(db: sqlite3.Connection) -> None:
    """Before anything else on a new connection: a database created now is incremental from the
    start (the setting only takes before the first table, and before WAL mode is entered)."""
    db.execute("PRAGMA auto_vacuum=INCREMENTAL")


def wal_limit(max_bytes: int) -> int:
    """The write-ahead log's share of a spool bound: a sixteenth, at most ``WAL_LIMIT_BYTES``."""
    return max(MIN_WAL_BYTES, min(WAL_LIMIT_BYTES, max_bytes // 16))


def slack_pages(max_bytes: int, page_size: int) -> int:
    """Free pages kept between compactions: ``SLACK_PAGES``, at most a sixteenth of the bound."""
    return max(16, min(SLACK_PAGES, max_bytes // 16 // page_size))


def bound_wal(db: sqlite3.Connection, limit: int = WAL_LIMIT_BYTES) -> None:
    """The log checkpointed when it reaches ``limit`` and cut back to it when it restarts."""
    page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
    db.execute(f"PRAGMA journal_size_limit={limit}")
    db.execute(f"PRAGMA wal_autocheckpoint={max(16, limit // page_size)}")


def used_bytes(db: sqlite3.Connection) -> int:
    """The database file's pages in use (not free): what its rows and state take on disk."""
    pages = int(db.execute("PRAGMA page_count").fetchone()[0])
    return (pages - _free_pages(db)) * int(db.execute("PRAGMA page_size").fetchone()[0])


def convert(db: sqlite3.Connection, path: Path) -> None:
    """An older database (no auto_vacuum) converted once with a VACUUM, which needs as much free
    space as the database itself: on a full disk it fails, is logged and tried at the next start
    (the agent runs as before, with a file that does not shrink)."""
    if db.execute("PRAGMA auto_vacuum").fetchone()[0] == INCREMENTAL:
        return
    log = logs.get("outbox")
    size = _size(path)
    try:
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.Error as exc:
        logs.event(
            log,
            logging.WARNING,
            "cannot convert the state database to incremental "
            "vacuum (needs free space as large as the database); will try at the next "
            "start",
            error=str(exc),
            bytes=size,
        )
        return
    logs.event(
        log,
        logging.INFO,
        "state database converted to incremental vacuum (once)",
        bytes_before=size,
        bytes_after=_size(path),
    )


def compact(
    db: sqlite3.Connection,
    wal: Path,
    *,
    max_steps: int = MAX_STEPS,
    keep: int = SLACK_PAGES,
    wal_bytes: int = WAL_LIMIT_BYTES,
) -> Compaction:
    """Hand free pages back (at most ``max_steps`` steps) and truncate the write-ahead log when
    it is over its limit or pages were handed back. Raises ``sqlite3.Error`` (a full disk: the
    caller logs it and tries again later)."""
    free = _free_pages(db)
    freed = 0
    steps = 0
    while free > keep and steps < max_steps:
        # executescript steps the pragma to the end (execute() frees one page per call)
        db.executescript(f"PRAGMA incremental_vacuum({min(STEP_PAGES, free)});")
        steps += 1
        now = _free_pages(db)
        freed += free - now
        if now >= free:
            break  # not an incremental database (conversion failed): nothing to hand back
        free = now
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    truncated = False
    if freed or _size(wal) > wal_bytes:
        busy = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        truncated = not busy
    return Compaction(freed, free, truncated)


def is_disk_full(exc: BaseException) -> bool:
    """``ENOSPC``, or SQLite's SQLITE_FULL ("database or disk is full")."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    return "disk is full" in str(exc) or "No space left" in str(exc)


def _free_pages(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA freelist_count").fetchone()[0])


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


class Keeper:
    """The agent's chore: ``compact`` now and then, a line when a reclaim is done and one when
    it cannot run (a full disk), not one per attempt."""

    def __init__(self, compact: Callable[[], Compaction], page_size: int = 4096) -> None:
        self.compact = compact
        self.page_size = page_size
        self.log = logs.get("outbox")
        self._freed = 0
        self._failing = False

    def run(self) -> None:
        try:
            done = self.compact()
        except sqlite3.Error as exc:
            if not self._failing:
                self._failing = True
                logs.event(
                    self.log,
                    logging.WARNING,
                    "cannot give disk space back now; will try again",
                    error=str(exc),
                )
            return
        self._failing = False
        self._freed += done.freed_pages
        if self._freed and done.free_pages <= SLACK_PAGES:
            logs.event(
                self.log,
                logging.INFO,
                "state database: free space given back to the file system",
                bytes=self._freed * self.page_size,
            )
            self._freed = 0
