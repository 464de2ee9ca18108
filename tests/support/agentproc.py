"""Run the real agent as a subprocess (``se-forwarder run``) and read what it says."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SE_FORWARDER = [sys.executable, "-m", "se_forwarder.cli"]


def write_config(path: Path, imds_url: str, state_dir: Path, *, extra: str = "",
                 poll_interval: float = 0.2, heartbeat_interval: float = 300,
                 file_sink: Path | None = None, imds_extra: str = "") -> Path:
    text = f"""
[agent]
state_dir = "{state_dir}"
poll_interval = {poll_interval}
heartbeat_interval = {heartbeat_interval}
stop_flush_seconds = 3

[imds]
endpoint = "{imds_url}"
first_call_timeout = 10
timeout = 2
{imds_extra}
"""
    if file_sink is not None:
        text += f'\n[sinks.file]\npath = "{file_sink}"\n'
    path.write_text(text + extra)
    return path


class AgentProcess:
    """The agent under test. JSON log lines from stderr are collected as dicts in ``lines``."""

    def __init__(self, config: Path, *, env: dict[str, str] | None = None) -> None:
        self.lines: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            SE_FORWARDER + ["run", "--config", str(config)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})}, cwd=REPO)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._lock:
                self.raw.append(line)
                try:
                    self.lines.append(json.loads(line))
                except ValueError:
                    pass

    def records(self) -> list[dict[str, Any]]:
        """The 'record' log lines: written once per record, right after it was committed."""
        with self._lock:
            return [ln for ln in self.lines if ln.get("msg") == "record"]

    def messages(self, msg: str) -> list[dict[str, Any]]:
        with self._lock:
            return [ln for ln in self.lines if ln.get("msg") == msg]

    def wait_for(self, predicate: Callable[[AgentProcess], bool], timeout: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            if self.proc.poll() is not None:
                self._reader.join(2)
                return predicate(self)
            time.sleep(0.05)
        return predicate(self)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout)
        self._reader.join(5)
        return rc

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)
