"""``se-forwarder collect``: the collector, a long-running service for one place in the fleet
(not every VM): Azure's own record of every VM's maintenance into ``ScheduledEventsPlatform_CL``,
from the Event Hub the system topics deliver to, or from Azure Resource Graph."""

from __future__ import annotations

import argparse
import logging
import sqlite3
import threading

from .. import logs
from ..errors import ConfigError, StateError
from ..oshost import signals
from ._config import config_arg, load_or_report


def configure(parser: argparse.ArgumentParser) -> None:
    config_arg(parser)
    parser.add_argument(
        "--resource-graph",
        action="store_true",
        help="read Azure Resource Graph (maintenanceresources, healthresources) "
        "instead of the Event Hub: for subscriptions without the Event Grid "
        "channel, or a backfill",
    )
    parser.add_argument(
        "--once", action="store_true", help="with --resource-graph: one pass, then stop"
    )
    parser.add_argument("--log-format", choices=("json", "text"))


def run(args: argparse.Namespace) -> int:
    # First of all: a stop request during start-up (imports, opening the store) is honoured,
    # not fatal.
    stop = threading.Event()
    signals.install(stop.set)
    from ..collector.config import CollectorFileConfig

    config = load_or_report(args, CollectorFileConfig)
    if config is None:
        return 2
    logs.setup(args.log_format or config.agent.log_format, config.agent.log_level)
    log = logs.get("collector")
    cfg = config.collector
    if cfg is None:
        logs.event(log, logging.CRITICAL, "no [collector] section in the configuration")
        return 2
    why = None if args.resource_graph else cfg.event_hub_ready()
    if why:
        logs.event(log, logging.CRITICAL, f"the Event Hub channel is not configured: {why}")
        return 2
    from ..collector.service import Collector

    try:
        collector = Collector(config, cfg, stop)
    except ConfigError as exc:
        logs.event(log, logging.CRITICAL, str(exc))
        return 2
    except StateError as exc:
        logs.event(log, logging.CRITICAL, str(exc), state_dir=str(config.agent.state_dir))
        return 1
    except (OSError, sqlite3.Error) as exc:
        logs.event(
            log,
            logging.CRITICAL,
            "cannot open the state directory",
            state_dir=str(config.agent.state_dir),
            error=f"{type(exc).__name__}: {exc}",
        )
        return 1
    try:
        if args.resource_graph:
            return collector.run_graph(once=args.once)
        return collector.run_hub()
    except Exception:
        log.critical("the collector stopped on an internal error (please report it)", exc_info=True)
        return 1
