"""Start the real agent (``se-forwarder run``) as a subprocess against a simulator."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path


def se_forwarder_cmd() -> list[str]:
    """The console script next to this interpreter (the venv's), else ``python -m``."""
    exe = Path(sys.executable).with_name("se-forwarder")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("se-forwarder")
    return [found] if found else [sys.executable, "-m", "se_forwarder.cli"]


def write_config(workdir: Path, endpoint: str, *, poll_interval: float,
                 heartbeat_interval: float = 300.0, log_level: str = "info") -> Path:
    """A config with the file sink only (the configuration the RSS goal is stated for)."""
    state = workdir / "state"
    cfg = workdir / "config.toml"
    cfg.write_text(f"""
[agent]
state_dir = "{state}"
poll_interval = {poll_interval}
heartbeat_interval = {heartbeat_interval}
log_format = "json"
log_level = "{log_level}"
stop_flush_seconds = 2

[imds]
endpoint = "{endpoint}"
first_call_timeout = 10
timeout = 2.0

[sinks.file]
path = "{workdir / 'records.jsonl'}"
""")
    return cfg


def start_agent(config: Path, *, stderr=subprocess.DEVNULL) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SE_FORWARDER_")}
    return subprocess.Popen([*se_forwarder_cmd(), "run", "--config", str(config)],
                            stdout=subprocess.DEVNULL, stderr=stderr, env=env)


def stop(proc: subprocess.Popen, timeout: float = 15.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()
