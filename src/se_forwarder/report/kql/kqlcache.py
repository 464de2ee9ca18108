"""duckdb-kql's translations kept on disk, for the processes that build reports one after another.

Translating is most of a report's CPU on small tables (duckdb-kql parses KQL with a Python
ANTLR parser: ~25 s of CPU for the workbooks' queries), and it is the same work every time the
same query text meets the same tables. A directory named by ``SE_FORWARDER_KQL_CACHE`` keeps each
translation as one JSON file, keyed by duckdb-kql's version, the query's text and the tables'
columns: a new version or another schema is another key, never a stale answer. Off unless that
variable names a directory (the report writes nothing of its own accord); the test suite shares
one per run. A file that cannot be read or decoded is a miss. What the folder holds is run as
SQL: it must be the user's own, as a Python cache is.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

try:  # POSIX: a translation being made is claimed (``claim``); elsewhere each process makes it
    import fcntl
except ImportError:  # pragma: no cover - Windows
    _LOCKS = False
else:
    _LOCKS = True

ENV = "SE_FORWARDER_KQL_CACHE"

#: (SQL, bound values, names of the values that are the translation's clock)
Translation = tuple[str, dict[str, Any], tuple[str, ...]]


class _Unstorable(Exception):
    """A bound value JSON cannot carry: the translation stays in memory only."""


def directory() -> Path | None:
    """The cache's directory, or None when caching on disk is off."""
    named = os.environ.get(ENV)
    return Path(named) if named else None


def key(text: str, schema: tuple[Any, ...]) -> str:
    """The file name of ``text``'s translation over ``schema`` (table -> columns)."""
    blob = json.dumps([_translator(), text, schema], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@cache
def _translator() -> str:
    return f"duckdb-kql {version('duckdb-kql')}"


def get(folder: Path, name: str) -> Translation | None:
    """The translation stored under ``name``, or None (absent, unreadable, not ours)."""
    try:
        data = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
        return data["sql"], {k: _decode(v) for k, v in data["values"].items()}, tuple(data["clock"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextmanager
def claim(folder: Path, name: str) -> Iterator[None]:
    """Hold ``name`` while translating it: another process that wants the same translation
    waits for this one's file instead of making it again beside it (the suite's workers start
    with the same queries). Where the lock cannot be taken (no ``fcntl``, a read-only folder)
    it holds nothing and each process translates: slower, never wrong."""
    if not _LOCKS:
        yield
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / f".{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def put(folder: Path, name: str, translation: Translation) -> bool:
    """Store ``translation`` (atomically: a reader sees all of a file or none); False when a
    value cannot be stored or the folder cannot be written."""
    sql, values, clock = translation
    try:
        data = {
            "sql": sql,
            "values": {k: _encode(v) for k, v in values.items()},
            "clock": list(clock),
        }
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out)
        os.replace(tmp, folder / f"{name}.json")
        return True
    except (_Unstorable, OSError):
        return False


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, timedelta):
        return {"timedelta": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, (list, tuple)):
        return {"list": [_encode(v) for v in value]}
    raise _Unstorable(type(value).__name__)


def _decode(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    if "datetime" in value:
        return datetime.fromisoformat(value["datetime"])
    if "timedelta" in value:
        days, seconds, micros = value["timedelta"]
        return timedelta(days=days, seconds=seconds, microseconds=micros)
    return [_decode(v) for v in value["list"]]
