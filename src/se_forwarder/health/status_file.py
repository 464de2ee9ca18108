"""status.json, written atomically every few seconds and at stop; on a full disk, where no new
file can be made, rewritten in place within the blocks it already has, so `status` still tells.

When the state directory cannot be written (full, or forced read-only), the snapshot says so
(``problem``, read by ``HealthView``: ``persist_error``, ``disk_full``) at once, and a second
copy on the runtime directory, which stays writable, carries it (``runtime_copy.py``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from .. import logs, redact
from ..platform import files
from .snapshot import STATUS_FILE


class Reported(Protocol):
    """A snapshot status.json is written from (the agent's, the collector's)."""

    def to_json(self) -> dict[str, Any]: ...


STATUS_MODE = 0o600  # as every file of the state directory
STATUS_BLOCK = 4096  # status.json is padded to whole blocks: rewritable in place on a full disk


class StatusFile:
    def __init__(self, state_dir: Path, runtime_dir: Path | None = None) -> None:
        self.path = state_dir / STATUS_FILE
        self.copy = runtime_dir / STATUS_FILE if runtime_dir is not None else None
        self.problem: OSError | None = None  # why the state directory's copy cannot be written
        self._copy_failing = False
        self.log = logs.get("agent")

    def write(self, take: Callable[[], Reported]) -> None:
        """``take()``'s snapshot to both copies; secrets masked inside every value. When the
        state directory's fails, the snapshot is taken again: it then says why."""
        data = _encode(take())
        problem = _replace(self.path, data)
        if problem is not None:
            first = self.problem is None
            self.problem = problem
            data = _encode(take())
            if not self._rewrite_in_place(data) and first:
                logs.event(self.log, logging.WARNING, "cannot write status.json in the state "
                           "directory", error=str(problem), runtime_copy=str(self.copy))
        elif self.problem is not None:
            self.problem = None
        if self.copy is not None:
            failed = _replace(self.copy, data, mkdir=True)
            if failed is not None and not self._copy_failing:
                logs.event(self.log, logging.WARNING, "cannot write the runtime copy of "
                           "status.json", path=str(self.copy), error=str(failed))
            self._copy_failing = failed is not None

    def _rewrite_in_place(self, data: bytes) -> bool:
        try:
            if self.path.stat().st_size < len(data):
                return False
            with self.path.open("r+b") as f:
                f.write(data)
                f.truncate(len(data))
            return True
        except OSError:
            return False


def _encode(snap: Reported) -> bytes:
    text = json.dumps(redact.data(snap.to_json(), by_key=False), separators=(",", ":"))
    data = text.encode("utf-8")
    return data + b" " * (-len(data) % STATUS_BLOCK)  # whitespace after JSON is still JSON


def _replace(path: Path, data: bytes, *, mkdir: bool = False) -> OSError | None:
    """A new file renamed over ``path``; the error, if it could not be."""
    try:
        if mkdir:
            path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
        files.replace(path, data, STATUS_MODE)
    except OSError as exc:
        return exc
    return None
