"""``se-forwarder run`` and ``se-forwarder check-config``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sqlite3
import sys
import threading

from . import logs, platform
from .config import Config, ConfigError, load, masked


def _config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE",
                        help=f"TOML config (default: {platform.current().default_config_path()} if it "
                             "exists); SE_FORWARDER_<SECTION>__<KEY> variables override it")


def _load(args: argparse.Namespace) -> Config | None:
    """The config, or None after printing the error (the caller exits 2)."""
    path = args.config
    if path is None:
        default = str(platform.current().default_config_path())
        path = default if os.path.exists(default) else None
    try:
        return load(path)
    except ConfigError as exc:
        print(f"se-forwarder: config error: {exc}", file=sys.stderr)
        return None


def configure(parser: argparse.ArgumentParser) -> None:
    _config_arg(parser)
    parser.add_argument("--log-format", choices=("json", "text"),
                        help="override agent.log_format (json for machines, text for people)")


def run(args: argparse.Namespace) -> int:
    config = _load(args)
    if config is None:
        return 2
    logs.setup(args.log_format or config.agent.log_format, config.agent.log_level)
    from . import signals
    from .agent import Agent
    from .sinks import factory
    stop = threading.Event()
    signals.install(stop.set)
    try:
        sinks = factory.build(config)
    except Exception as exc:  # noqa: BLE001 - a sink that cannot even be built: say which
        logs.event(logs.get("agent"), logging.CRITICAL, "cannot set up sinks", error=f"{type(exc).__name__}: {exc}")
        return 1
    if not sinks:
        logs.event(logs.get("agent"), logging.WARNING, "no sink configured: records stay in the outbox")
    try:
        agent = Agent(config, sinks, stop=stop)
    except (OSError, sqlite3.Error) as exc:  # the state directory cannot be created or written
        logs.event(logs.get("agent"), logging.CRITICAL, "cannot open the state directory",
                   state_dir=str(config.agent.state_dir), error=f"{type(exc).__name__}: {exc}")
        return 1
    signals.install(agent.request_stop)
    return agent.run()


class check:
    """``check-config``: validate and print the effective configuration, secrets masked."""

    @staticmethod
    def configure(parser: argparse.ArgumentParser) -> None:
        _config_arg(parser)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        config = _load(args)
        if config is None:
            return 2
        print(json.dumps(masked(config), indent=2, default=str))
        return 0
