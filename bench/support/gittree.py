"""Another commit's folders (``src``, ``dashboards``) for a bench to run beside this tree's:
``git archive`` extracted under a folder, no work tree touched."""

from __future__ import annotations

import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def export(ref: str, into: Path, *paths: str) -> Path:
    """``paths`` of ``ref`` under ``into`` (returned); ``subprocess.CalledProcessError`` when git
    cannot (an unknown ref, no repository)."""
    data = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, *paths], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into
