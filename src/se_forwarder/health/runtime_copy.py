"""status.json's second copy, on a file system that stays writable when the state directory's
does not.

A full or read-only disk must show in ``status`` within seconds, as DISK FULL, not as HEALTHY
until status.json looks stale and then as "hung or not running". So the agent notices at its next
status write (every few seconds) that the
state directory cannot be written and says so in the snapshot, and it writes status.json twice:
into the state directory, and into its runtime directory (``agent.runtime_dir``; by default
``$RUNTIME_DIRECTORY``, which systemd's ``RuntimeDirectory=se-forwarder`` sets: a tmpfs under
/run). The state directory's copy names the other (``runtime_copy``), so ``status`` finds it with
no configuration, and reads the fresher of the two. It takes the runtime copy only when it is a
regular file owned by whoever owns the state directory's (the agent): the name in a file is not
a licence to read any file.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import StatusFileError
from .read import parse_time

Load = Callable[[Path], dict[str, Any] | None]  # None: no such file; StatusFileError: unusable


def runtime_dir(configured: str, environ: Mapping[str, str] = os.environ) -> Path | None:
    """Where the runtime copy goes: ``agent.runtime_dir``, else systemd's RuntimeDirectory."""
    where = configured or environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    return Path(where) if where else None


def freshest(path: Path, load: Load) -> dict[str, Any] | None:
    """status.json at ``path``, or the runtime copy it names when that one is fresher."""
    data = load(path)
    other = data.get("runtime_copy") if data else None
    if not isinstance(other, str) or not other or not _same_owner(path, Path(other)):
        return data
    try:
        copy = load(Path(other))
    except StatusFileError:
        return data
    return copy if copy is not None and _written(copy) > _written(data) else data


def _same_owner(path: Path, other: Path) -> bool:
    try:
        mine, theirs = os.stat(path), os.lstat(other)
    except OSError:
        return False
    return stat.S_ISREG(theirs.st_mode) and theirs.st_uid == mine.st_uid


def _written(data: dict[str, Any] | None) -> float:
    try:
        t = parse_time((data or {}).get("written_at"))
    except (ValueError, TypeError):
        t = None
    return -math.inf if t is None else t
