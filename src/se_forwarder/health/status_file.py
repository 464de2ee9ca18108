"""status.json, written atomically every few seconds and at stop; on a full disk, where no new
file can be made, rewritten in place within the blocks it already has, so `status` still tells."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Protocol

from .. import logs, redact
from .snapshot import STATUS_FILE


class Reported(Protocol):
    """A snapshot status.json is written from (the agent's, the collector's)."""

    def to_json(self) -> dict[str, Any]: ...

STATUS_BLOCK = 4096  # status.json is padded to whole blocks: rewritable in place on a full disk


class StatusFile:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / STATUS_FILE
        self.log = logs.get("agent")

    def write(self, snap: Reported) -> None:
        """A new file renamed over the old; secrets masked inside every value."""
        text = json.dumps(redact.data(snap.to_json(), by_key=False), separators=(",", ":"))
        data = text.encode("utf-8")
        data += b" " * (-len(data) % STATUS_BLOCK)  # whitespace after JSON is still JSON
        tmp = self.path.with_suffix(".json.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, self.path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if not self._rewrite_in_place(data):
                logs.event(self.log, logging.WARNING, "cannot write status.json", error=str(exc))

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
