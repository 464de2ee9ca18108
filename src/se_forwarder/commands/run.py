"""``se-forwarder run``: the agent (a systemd or Windows service in production)."""

from __future__ import annotations

import argparse
import logging
import sqlite3
import threading

from .. import logs
from ..errors import StateError
from ..oshost import signals
from ._config import config_arg, load_or_report


def configure(parser: argparse.ArgumentParser) -> None:
    config_arg(parser)
    parser.add_argument(
        "--log-format",
        choices=("json", "text"),
        help="override agent.log_format (json for machines, text for people)",
    )


def run(args: argparse.Namespace) -> int:
    config = load_or_report(args)
    if config is None:
        return 2
    logs.setup(args.log_format or config.agent.log_format, config.agent.log_level)
    from ..agent import Agent
    from ..sinks import registry
    from ..sinks.base import SinkContext

    stop = threading.Event()
    signals.install(stop.set)
    try:
        sinks = registry.build(config.sinks, SinkContext.of(config))
    except Exception as exc:
        logs.event(
            logs.get("agent"),
            logging.CRITICAL,
            "cannot set up sinks",
            error=f"{type(exc).__name__}: {exc}",
        )
        return 1
    if not sinks:
        logs.event(
            logs.get("agent"), logging.WARNING, "no sink configured: records stay in the outbox"
        )
    try:
        agent = Agent(config, sinks, stop=stop)
    except StateError as exc:  # another agent holds the state directory: one line, exit 1
        logs.event(
            logs.get("agent"), logging.CRITICAL, str(exc), state_dir=str(config.agent.state_dir)
        )
        for sink in sinks:
            sink.close()
        return 1
    except (OSError, sqlite3.Error) as exc:  # the state directory cannot be created or written
        logs.event(
            logs.get("agent"),
            logging.CRITICAL,
            "cannot open the state directory",
            state_dir=str(config.agent.state_dir),
            error=f"{type(exc).__name__}: {exc}",
        )
        return 1
    signals.install(agent.request_stop)
    try:
        return agent.run()
    except Exception:
        logs.get("agent").critical(
            "the agent stopped on an internal error (please report it)", exc_info=True
        )
        return 1
