"""The real agent in this process, on a FakeClock: the same ``Agent``, configuration and sinks as
``se-forwarder run``, on a thread of its own, while the test moves time (``wait_for`` runs the
clock until a condition holds). Minutes of polling, retries and heartbeats take milliseconds,
and each step of fake time is repeatable. What only a process shows (kill -9, signals, the
systemd unit, the state-directory lock, what ``run`` imports) stays with
``agentproc.AgentProcess``.

One ``AgentRun`` at a time in a process: the log lines are read from the ``se_forwarder``
logger, which all of them share.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from se_forwarder import health, logs
from se_forwarder.agent import Agent
from se_forwarder.commands.status import load as load_status
from se_forwarder.commands.status import render_text
from se_forwarder.config import Config, load
from se_forwarder.health.runtime_copy import freshest
from se_forwarder.health.status_file import filesystem
from se_forwarder.sinks import registry
from se_forwarder.sinks.base import SinkContext
from se_forwarder_testbed.agentproc import LogLines
from se_forwarder_testbed.fakeclock import FakeClock

QUIET = ("se_forwarder.simulator", "se_forwarder_testbed")  # the test bed's own loggers


class _Capture(logging.Handler):
    def __init__(self, run: AgentRun) -> None:
        super().__init__(logging.DEBUG)
        self.run = run

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(QUIET):
            return
        line = {
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
            "logger": record.name,
            **(getattr(record, "fields", None) or {}),
        }
        if record.exc_info:
            line["exception"] = logging.Formatter().formatException(record.exc_info)
        self.run._add(line)


class AgentRun(LogLines):
    def __init__(
        self,
        config: Path | Config,
        clock: FakeClock,
        *,
        sinks: list[Any] | None = None,
        settle: bool = True,
    ) -> None:
        """``settle=False``: return at once, while the agent is still starting (a first IMDS
        call held by the simulator, say); otherwise once it waits for its next poll."""
        super().__init__()
        self.config = config if isinstance(config, Config) else load(config, env={})
        self.clock = clock
        self.state_dir = Path(self.config.agent.state_dir)
        self.rc: int | None = None
        self.error: BaseException | None = None
        self._logger = logging.getLogger(logs.LOGGER_NAME)
        self._level = self._logger.level
        self._handler = _Capture(self)
        self._logger.addHandler(self._handler)
        self._logger.setLevel(logging.INFO)
        try:
            cx = SinkContext.of(self.config, clock)
            built = registry.build(self.config.sinks, cx) if sinks is None else sinks
            self.agent = Agent(self.config, built, stop=clock.event(), clock=clock)
        except BaseException:
            self._detach()
            raise
        self.thread = threading.Thread(target=self._run, name="agent", daemon=True)
        clock.track(self.thread)
        self.thread.start()
        if settle:
            clock.settle()  # started: status.json, the instance document, the first poll

    def _run(self) -> None:
        try:
            self.rc = self.agent.run()
        except BaseException as exc:
            self.error = exc
            self.rc = 1

    def wait_for(self, predicate: Callable[[Any], bool], timeout: float = 60.0) -> bool:
        """Run the clock until ``predicate(self)`` holds, for at most ``timeout`` fake seconds."""
        return self.clock.run_until(lambda: predicate(self), timeout)

    def stop(self, timeout: float = 120.0) -> int:
        """Ask it to stop, as SIGTERM does, and run the clock through its shutdown."""
        self.agent.request_stop()
        try:
            if not self.clock.run_until(lambda: not self.thread.is_alive(), timeout):
                raise AssertionError(f"the agent did not stop within {timeout} fake seconds")
            if self.error is not None:
                raise self.error
            assert self.rc is not None
            return self.rc
        finally:
            self._detach()

    def _detach(self) -> None:
        self._logger.removeHandler(self._handler)
        self._logger.setLevel(self._level)

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def status_json(self) -> dict[str, Any]:
        """What ``status`` reads: status.json, or its runtime copy when that is fresher."""
        data = freshest(self.state_dir / health.STATUS_FILE, load_status)
        assert data is not None, "no status.json"
        return data

    def verdict(self, **limits: Any) -> health.Assessment:
        """What ``se-forwarder status`` says, now on this run's clock."""
        snap, problems = health.read(self.status_json())
        return health.evaluate(
            snap,
            now=self.clock.wall_seconds(),
            limits=health.Limits(**limits),
            read_problems=problems,
            process_alive=lambda _pid: self.alive,
            filesystem=filesystem(self.state_dir),
        )

    def status_text(self) -> str:
        snap, _ = health.read(self.status_json())
        fs = filesystem(self.state_dir)
        if snap is not None and fs.problem:
            snap = health.rules.with_filesystem(snap, fs)
        return render_text(snap, self.verdict(), self.state_dir, now=self.clock.wall_seconds())
