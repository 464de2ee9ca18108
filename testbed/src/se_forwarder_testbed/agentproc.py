"""Run the real agent (``se-forwarder run``) as a process: the tests' and the benches' one way."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def se_forwarder_cmd() -> list[str]:
    """The console script next to this interpreter (the venv's), else ``python -m``."""
    exe = Path(sys.executable).with_name("se-forwarder")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("se-forwarder")
    return [found] if found else [sys.executable, "-m", "se_forwarder.cli"]


def write_config(
    path: Path,
    imds_url: str,
    state_dir: Path,
    *,
    extra: str = "",
    poll_interval: float = 0.2,
    heartbeat_interval: float = 300,
    file_sink: Path | None = None,
    imds_extra: str = "",
    log_level: str = "info",
    stop_flush_seconds: float = 3,
    agent_extra: str = "",
) -> Path:
    """A TOML config for an agent polling ``imds_url``; ``agent_extra`` and ``imds_extra`` go in
    their sections, ``extra`` is appended as it is."""
    text = f"""
[agent]
state_dir = "{state_dir}"
poll_interval = {poll_interval}
heartbeat_interval = {heartbeat_interval}
stop_flush_seconds = {stop_flush_seconds}
log_format = "json"
log_level = "{log_level}"
{agent_extra}

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


def start(
    config: Path,
    *,
    stderr: int | IO[Any] | None = subprocess.DEVNULL,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[str]:
    """``se-forwarder run --config CONFIG``; SE_FORWARDER_* variables of this process are not
    passed on (they would override the config), ``env`` is added."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SE_FORWARDER_")}
    return subprocess.Popen(
        [*se_forwarder_cmd(), "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
        env={**base, **(env or {})},
        cwd=cwd,
    )


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
    """Ask it to stop (SIGTERM), kill it if it does not within ``timeout``; its exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


class LogLines:
    """The agent's JSON log lines, as dicts (``lines``): what it committed (``records``) and said.
    ``wait_for`` is the subclass's: real time for a process, fake time in this process."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def _add(self, line: dict[str, Any]) -> None:
        with self._lock:
            self.lines.append(line)

    def records(self) -> list[dict[str, Any]]:
        """The 'record' log lines: written once per record, right after it was committed."""
        return self.messages("record")

    def messages(self, msg: str) -> list[dict[str, Any]]:
        with self._lock:
            return [ln for ln in self.lines if ln.get("msg") == msg]

    def logged(self, msg: str, **fields: Any) -> list[dict[str, Any]]:
        """Lines whose message contains ``msg`` and whose fields have these values."""
        with self._lock:
            return [
                ln
                for ln in self.lines
                if msg in str(ln.get("msg", "")) and all(ln.get(k) == v for k, v in fields.items())
            ]

    def wait_for(self, predicate: Callable[[Any], bool], timeout: float = 20.0) -> bool:
        raise NotImplementedError

    def wait_log(self, msg: str, timeout: float = 20.0, **fields: Any) -> dict[str, Any]:
        """The first line ``logged(msg, **fields)``; AssertionError if none within ``timeout``."""
        if not self.wait_for(lambda a: a.logged(msg, **fields), timeout):
            raise AssertionError(f"no log line {msg!r} {fields or ''} within {timeout} s")
        return self.logged(msg, **fields)[0]


class AgentProcess(LogLines):
    """The agent under test, a process. JSON log lines from stderr are collected as dicts in
    ``lines`` (and as text in ``raw``)."""

    def __init__(
        self, config: Path, *, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        super().__init__()
        self.raw: list[str] = []
        self.proc = start(config, stderr=subprocess.PIPE, env=env, cwd=cwd)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.raw.append(line)
            with contextlib.suppress(ValueError):
                self._add(json.loads(line))

    def wait_for(self, predicate: Callable[[Any], bool], timeout: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            if self.proc.poll() is not None:
                self._reader.join(2)
                return bool(predicate(self))
            time.sleep(0.05)
        return bool(predicate(self))

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
