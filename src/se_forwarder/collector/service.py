"""The collector's composition root: the agent's outbox, delivery pool and sinks, fed by a
channel (the Event Hub, Resource Graph passes, or both) instead of IMDS; its health in
status.json every few seconds and at stop, and in Prometheus metrics when ``[metrics]`` is set.
Everything that waits or reads the time goes through one ``Clock``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .. import contract, logs
from ..clock import SYSTEM, Clock
from ..config import Config
from ..delivery import DeliveryPool
from ..delivery.dead_letters import DeadLetters
from ..errors import ConfigError
from ..health.status_file import StatusFile
from ..identity import credential as identity
from ..outbox import Store
from ..sinks import registry
from ..sinks.base import SinkContext
from .config import CollectorConfig
from .health import EVENT_HUB, RESOURCE_GRAPH, CollectorHealth, CollectorSnapshot
from .status import StallWatch, stalls
from .writer import Writer

if TYPE_CHECKING:
    from ..metrics.exporter import Exporter
    from ..sinks.base import Sink
    from .approver import Approvals
    from .graph import GraphChannel
    from .hub import HubChannel

log = logs.get("collector")
STATUS_EVERY = 5.0  # seconds between status.json writes (as the agent's)


def platform_sinks(sinks: Sequence[Sink]) -> None:
    """Every row the collector writes is of the platform table: a sink that does not take it
    (stdout, a webhook, a file sink with no ``platform_path``) would skip them all, so it is named
    once in the log, and with no sink taking it the collector does not start (ConfigError)."""
    if not any(contract.PLATFORM in s.tables for s in sinks):
        raise ConfigError(
            "no configured sink takes the collector's rows "
            f"({contract.table(contract.PLATFORM).table}): "
            "configure [sinks.log_analytics], [sinks.event_hubs] or [sinks.file] with platform_path"
        )
    for s in sinks:
        if contract.PLATFORM not in s.tables:
            logs.event(
                log,
                logging.WARNING,
                "this sink does not take the collector's rows: none is written there",
                sink=s.name,
            )


class Collector:
    def __init__(
        self,
        config: Config,
        cfg: CollectorConfig,
        stop: threading.Event | None = None,
        clock: Clock = SYSTEM,
        peer_clock: Clock | None = None,
    ) -> None:
        """``peer_clock``: the clock of the sinks' and the credential's network deadlines and
        Retry-After dates (by default ``clock``; the demo, whose stand-ins answer in real time
        under a sped-up clock, gives the real one)."""
        self.config = config
        self.cfg = cfg
        self.clock = clock
        self.stop = stop or clock.event()
        peers = clock if peer_clock is None else peer_clock
        self.sinks = registry.build(config.sinks, SinkContext.of(config, peers))
        platform_sinks(self.sinks)
        self.store = Store(config.agent.state_dir, max_bytes=config.spool.max_bytes)
        self.store.register_sinks(
            (s.name for s in self.sinks), {s.name: s.tables for s in self.sinks}
        )
        self.pool = DeliveryPool(
            self.sinks,
            self.store,
            config.agent.state_dir / "dead-letter.jsonl",
            clock,
            dead_letter_max_bytes=config.spool.dead_letter_max_bytes,
        )
        self.writer = Writer(self.store, cfg.dedupe_window)
        self.credential = identity.build(config.identity, clock=peers)
        self.approvals: Approvals | None = None
        if cfg.preview_acknowledge.enabled:  # azure-mgmt-core and azure-monitor-query: only then
            from .approver import Approvals

            self.approvals = Approvals(
                cfg.preview_acknowledge,
                self.credential,
                self.writer,
                self.store,
                self.pool.notify,
                clock,
            )
            self.writer.observe = self.approvals.observe
        self.status_file = StatusFile(config.agent.state_dir)
        self.hub: HubChannel | None = None
        self.graph: GraphChannel | None = None
        self.health: CollectorHealth | None = None
        self.metrics: Exporter | None = None
        self.stall_watch = StallWatch(clock)

    # -- channels -------------------------------------------------------------------------------

    def run_hub(self) -> int:
        """The Event Hub until a stop request; Resource Graph passes beside it every
        ``resource_graph_interval`` seconds when that is set."""
        from .hub import SET_ASIDE_FILE, HubChannel

        set_aside = DeadLetters(
            self.config.agent.state_dir / SET_ASIDE_FILE,
            self.clock,
            max_bytes=self.config.spool.dead_letter_max_bytes,
            logger=log,
        )
        self.hub = HubChannel(
            self.cfg, self.credential, self.writer, self.pool.notify, self.clock, set_aside
        )
        if self.cfg.resource_graph_interval:
            self.graph = self._graph_channel(self.cfg.resource_graph_settle)
        elif self.approvals is not None:
            raise ConfigError(
                "collector.preview_acknowledge needs Resource Graph passes beside the hub "
                "(collector.resource_graph_interval): the inventory says what each VM is"
            )
        return self._run(self.hub.run, self.hub.close)

    def run_graph(self, *, once: bool = False) -> int:
        """Resource Graph passes only (``collect --resource-graph``)."""
        graph = self.graph = self._graph_channel()
        return self._run(lambda: graph.run(self.stop, once=once), lambda: None)

    def _graph_channel(self, settle: float = 0.0) -> GraphChannel:
        from .graph import GraphChannel

        graph = GraphChannel(
            self.cfg, self.credential, self.writer, self.pool.notify, self.clock, settle
        )
        if self.approvals is not None:
            graph.on_inventory = self.approvals.inventory
        return graph

    # -- lifecycle ------------------------------------------------------------------------------

    def _run(self, channel: Callable[[], None], close: Callable[[], None]) -> int:
        """Run ``channel`` (blocking) until a stop request, which calls ``close``."""
        self.health = CollectorHealth(
            channel=EVENT_HUB if self.hub else RESOURCE_GRAPH,
            hub=self.hub.stats if self.hub else None,
            graph=self.graph.stats if self.graph else None,
            graph_interval=self.graph.interval if self.graph else None,
            writer=self.writer,
            store=self.store,
            delivery=self.pool,
            clock=self.clock,
            approvals=self.approvals.stats if self.approvals else None,
        )
        self.pool.start()
        self.write_status()  # `status` says the collector runs from the first second
        self.metrics = self._metrics()
        threads = [
            self._thread("status", self._status_loop),
            self._thread("stop", lambda: self._close_on_stop(close)),
        ]
        if self.hub is not None and self.graph is not None:
            graph = self.graph
            threads.append(self._thread("resource-graph", lambda: graph.run(self.stop)))
        if self.approvals is not None:
            approvals = self.approvals
            threads.append(self._thread("approvals", lambda: approvals.run(self.stop)))
        logs.event(
            log,
            logging.INFO,
            "collector started",
            state_dir=str(self.config.agent.state_dir),
            channel=self.health.channel,
            resource_graph=self.graph is not None,
            approvals="PREVIEW acknowledge API" if self.approvals else "off (observe only)",
            sinks=[s.name for s in self.sinks],
        )
        try:
            channel()
        finally:
            self.stop.set()
            for t in threads:
                t.join(30)
            self._shutdown()
        return 0

    def _close_on_stop(self, close: Callable[[], None]) -> None:
        self.stop.wait()
        close()

    def _thread(self, name: str, target: Callable[[], object]) -> threading.Thread:
        t = threading.Thread(target=target, name=f"collector-{name}", daemon=True)
        if name != "stop":  # it waits on the stop event itself, not on the clock
            self.clock.track(t)
        t.start()
        return t

    def _status_loop(self) -> None:
        textfile_due = 0.0
        while not self.clock.wait(self.stop, STATUS_EVERY):
            self.write_status()
            self._log_stalls()
            now = self.clock.monotonic()
            if self.metrics is not None and now >= textfile_due:
                textfile_due = now + self.config.metrics.textfile_interval
                self._metrics_textfile()

    def _log_stalls(self) -> None:
        """A stall ``status`` would report (a partition, the checkpoint store) logged when it
        starts and when it ends, once each."""
        if self.hub is None:
            return
        now = self.stall_watch.clock.wall_seconds()
        self.stall_watch.update(stalls(self.snapshot(), now))

    def snapshot(self, *, stopped: bool = False) -> CollectorSnapshot:
        assert self.health is not None
        return self.health.snapshot(stopped=stopped)

    def write_status(self, *, stopped: bool = False) -> None:
        self.status_file.write(lambda: self.snapshot(stopped=stopped))

    def _shutdown(self) -> None:
        busy = self.pool.flush(self.config.agent.stop_flush_seconds)
        snap = self.snapshot(stopped=True)
        self.status_file.write(lambda: snap)
        self.status_file.close()
        if self.metrics is not None:
            self._metrics_textfile()
            self.metrics.stop()
        logs.event(
            log,
            logging.INFO,
            "collector stopped",
            committed=snap.committed,
            duplicate_notifications=snap.duplicate_notifications,
            duplicate_records=snap.duplicate_records,
            dropped=snap.dropped,
            parse_failures=snap.parse_failures,
            checkpoint_failures=snap.checkpoint_failures,
            spool_depth=snap.spool_depth,
            sinks_busy=busy,
        )
        for sink in self.sinks:
            sink.close()
        if self.approvals is not None:
            self.approvals.close()
        close = getattr(self.credential, "close", None)
        if close is not None:
            close()
        if not self.pool.alive():  # a live worker still holds the store
            self.store.close()

    # -- metrics (prometheus-client is imported only when [metrics] is configured) -------------

    def _metrics(self) -> Exporter | None:
        if not self.config.metrics.enabled:
            return None
        from ..metrics.exporter import Exporter

        exporter = Exporter(self.config.metrics, self.snapshot)
        try:
            exporter.start()
        except OSError as exc:  # the port is taken: say so, and keep collecting
            logs.event(
                log,
                logging.ERROR,
                "cannot serve metrics; the textfile (if any) is still written",
                listen=self.config.metrics.listen,
                error=str(exc),
            )
        return exporter

    def _metrics_textfile(self) -> None:
        if self.metrics is None:
            return
        try:
            self.metrics.write_textfile()
        except OSError as exc:
            logs.event(
                log,
                logging.WARNING,
                "cannot write the metrics textfile",
                path=str(self.config.metrics.textfile),
                error=str(exc),
            )
