"""status.json, written every few seconds and at stop.

The first write of a run, and any write that changes the file's size, makes a new file renamed
over the old (a reader sees one or the other). Between those, the JSON is padded to whole blocks,
so the next one has the same size and is written over the old in place: on ext4 a rename over a
file forces the new file's blocks to be allocated at once, and that was most of an idle agent's
status cost (0.13 ms against 0.01 ms, every 5 s on every VM). A reader that meets a write half
done reads again (``commands/status.py``, ``load``). On a full disk, where no new file can be made, the in-place
write is also what keeps `status` telling."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from .. import logs, redact
from .snapshot import STATUS_FILE, Snapshot

STATUS_BLOCK = 4096  # status.json is padded to whole blocks: rewritable in place


class StatusFile:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / STATUS_FILE
        self.log = logs.get("agent")
        self._size: int | None = None  # what this run last wrote, when it made the file

    def write(self, snap: Snapshot) -> None:
        """The snapshot as JSON, secrets masked inside every value."""
        text = json.dumps(redact.data(snap.to_json(), by_key=False), separators=(",", ":"))
        data = text.encode("utf-8")
        data += b" " * (-len(data) % STATUS_BLOCK)  # whitespace after JSON is still JSON
        if len(data) == self._size and self._overwrite(data, same_size=True):
            return
        tmp = self.path.with_suffix(".json.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, self.path)
            self._size = len(data)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            self._size = None
            if not self._overwrite(data, same_size=False):
                logs.event(self.log, logging.WARNING, "cannot write status.json", error=str(exc))

    def _overwrite(self, data: bytes, *, same_size: bool) -> bool:
        """``data`` written over the file's own blocks. ``same_size``: only into a file of
        exactly that size (one this run made, not replaced since); else into any file at least
        that large, cut to size (a full disk)."""
        try:
            with self.path.open("r+b") as f:
                size = os.fstat(f.fileno()).st_size
                if (size != len(data)) if same_size else (size < len(data)):
                    return False
                f.write(data)
                if not same_size:
                    f.truncate(len(data))
            return True
        except OSError:
            return False
