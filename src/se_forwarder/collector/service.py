"""The collector's composition root: the agent's outbox, delivery pool and sinks, fed by a
channel (the Event Hub, or Resource Graph passes) instead of IMDS."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from .. import logs
from ..config import Config
from ..delivery import DeliveryPool
from ..outbox import Store
from ..sinks import credential as identity
from ..sinks import registry
from .config import CollectorConfig
from .writer import Writer

log = logs.get("collector")


class Collector:
    def __init__(self, config: Config, cfg: CollectorConfig,
                 stop: threading.Event | None = None) -> None:
        self.config = config
        self.cfg = cfg
        self.sinks = registry.build(config)
        self.store = Store(config.agent.state_dir, max_bytes=config.spool.max_bytes)
        self.store.register_sinks(s.name for s in self.sinks)
        self.pool = DeliveryPool(self.sinks, self.store,
                                 config.agent.state_dir / "dead-letter.jsonl")
        self.writer = Writer(self.store, cfg.dedupe_window)
        self.credential = identity.build(config.identity)
        self.stop = stop or threading.Event()

    def run(self, channel: Callable[[], None], close: Callable[[], None]) -> int:
        """Run ``channel`` (blocking) until a stop request, which calls ``close``."""
        self.pool.start()
        stopper = threading.Thread(target=self._close_on_stop, args=(close,), daemon=True)
        stopper.start()
        logs.event(log, logging.INFO, "collector started", state_dir=str(self.config.agent.state_dir),
                   sinks=[s.name for s in self.sinks])
        try:
            channel()
        finally:
            self.stop.set()
            self._shutdown()
        return 0

    def _close_on_stop(self, close: Callable[[], None]) -> None:
        self.stop.wait()
        close()

    def _shutdown(self) -> None:
        busy = self.pool.flush(self.config.agent.stop_flush_seconds)
        c = self.writer.counters
        logs.event(log, logging.INFO, "collector stopped", committed=c.committed,
                   duplicate_notifications=c.duplicate_notifications,
                   duplicate_records=c.duplicate_records, dropped=c.dropped_by_spool,
                   spool_depth=self.store.depths(), sinks_busy=busy)
        for sink in self.sinks:
            sink.close()
        close = getattr(self.credential, "close", None)
        if close is not None:
            close()
        if not self.pool.alive():  # a live worker still holds the store
            self.store.close()

    def hub_channel(self) -> Any:
        from .hub import HubChannel
        return HubChannel(self.cfg, self.credential, self.writer, self.pool.notify)

    def graph_channel(self) -> Any:
        from .graph import GraphChannel
        return GraphChannel(self.cfg, self.credential, self.writer, self.pool.notify)
