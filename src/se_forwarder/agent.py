"""The agent: the composition root. It builds the pieces from the configuration (the store, the
IMDS client, the recorder, the delivery workers, the policy's actions, health and metrics), wires
them to one clock, runs the poll loop (loop/) and shuts everything down in order.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__, actions, logs
from .clock import SYSTEM, Clock
from .config import Config
from .delivery import DeliveryPool
from .health.assemble import HealthView
from .health.heartbeats import Heartbeats
from .health.runtime_copy import runtime_dir
from .health.snapshot import Snapshot
from .health.status_file import StatusFile
from .imds.client import ImdsClient
from .imds.identity import IdentityWatch
from .loop import Chore, Chores, PollLoop
from .model import Heartbeat, LifecycleRecord, VmIdentity
from .outbox import space
from .outbox.recovery import open_or_recover
from .recording.hold import HOLD_SECONDS
from .recording.rebuild import rebuild
from .recording.recorder import Recorder
from .sinks.base import Sink

if TYPE_CHECKING:
    from .kube.controller import KubeActions
    from .metrics.exporter import Exporter

STATUS_EVERY = 5.0  # seconds between status.json writes
CHECKPOINT_EVERY = 30.0  # seconds between saves of the last successful poll time
COMPACT_EVERY = 5.0  # seconds between hand-backs of the state database's free space


class Agent:
    def __init__(
        self,
        config: Config,
        sinks: list[Sink],
        *,
        stop: threading.Event | None = None,
        on_records: Callable[[list[LifecycleRecord]], None] | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.config = config
        self.clock = clock
        self.stop = stop or clock.event()
        self.log = logs.get("agent")
        self.state_dir = Path(config.agent.state_dir)
        self.store, recovered = open_or_recover(
            self.state_dir, rebuild=rebuild, max_bytes=config.spool.max_bytes, clock=clock
        )
        if recovered:
            logs.event(self.log, logging.CRITICAL, recovered, state_dir=str(self.state_dir))
        self.sinks = sinks
        self._user_on_records = on_records
        imds = config.imds
        self.client = ImdsClient(
            imds.endpoint,
            api_version=imds.api_version,
            timeout=imds.timeout,
            first_call_timeout=imds.first_call_timeout,
            max_requests_per_second=imds.max_requests_per_second,
            stop=self.stop,
            clock=clock,
        )
        self.delivery = DeliveryPool(
            sinks,
            self.store,
            self.state_dir / "dead-letter.jsonl",
            clock,
            dead_letter_max_bytes=config.spool.dead_letter_max_bytes,
        )
        self.actions = actions.build(
            config.policy,
            self.store,
            imds,
            self.client.limiter,
            clock,
            wake=self.delivery.notify,
            identity=config.identity,
        )
        self.kube = self._kube()
        self.identity = IdentityWatch(
            self.client,
            vm_name=config.agent.vm_name,
            refresh_seconds=imds.instance_refresh_seconds,
            on_change=self._identity_changed,
            urgent=lambda: self.recorder.hold.waiting,
            tags=config.agent.tags,
            node=self.kube.identity_fields if self.kube is not None else None,
        )
        self.recorder = Recorder(
            self.store,
            self.identity.vm,
            on_records=self._on_records,
            clock=clock,
            hold_seconds=HOLD_SECONDS,
        )
        self.loop = PollLoop(
            self.client,
            self.recorder,
            self._chores(),
            interval=config.agent.poll_interval,
            stop=self.stop,
            clock=clock,
        )
        self.status_file = StatusFile(self.state_dir, runtime_dir(config.agent.runtime_dir))
        self.health = HealthView(
            recorder=self.recorder,
            loop=self.loop,
            store=self.store,
            delivery=self.delivery,
            actions=self.actions.stats,
            vm=self._vm,
            poll_interval=config.agent.poll_interval,
            clock=clock,
            status=self.status_file,
            tags_truncated=lambda: self.identity.truncated,
        )
        self.heartbeats = Heartbeats(
            self.health, self.recorder, self._vm, committed=self.delivery.notify, clock=clock
        )
        self.metrics = self._metrics()
        self._textfile_error: str | None = None  # the last reason the textfile was not written
        self.recorder.hold.on_hold = self._identity_chore.soon  # ask at once, not in a minute

    def _chores(self) -> Chores:
        agent = self.config.agent
        self._identity_chore = Chore(
            "identity", self.identity.refresh, self.config.imds.instance_refresh_seconds
        )
        chores = [
            self._identity_chore,
            Chore("status", self.write_status, STATUS_EVERY),
            Chore(
                "heartbeat",
                lambda: self.heartbeats.send("periodic"),
                agent.heartbeat_interval,
                first_in=agent.heartbeat_interval,
            ),
            Chore(
                "checkpoint", self.recorder.checkpoint, CHECKPOINT_EVERY, first_in=CHECKPOINT_EVERY
            ),
            Chore("compact", space.Keeper(self.store.compact).run, COMPACT_EVERY),
        ]
        if self.config.metrics.enabled:
            chores.append(
                Chore("metrics", self._metrics_textfile, self.config.metrics.textfile_interval)
            )
        return Chores(chores)

    # -- lifecycle ----------------------------------------------------------------------------

    def run(self) -> int:
        gone = self.store.register_sinks(self.delivery.names, self.delivery.tables)
        for name, backlog in gone.items():
            logs.event(
                self.log,
                logging.WARNING,
                "sink no longer configured; its backlog is released",
                sink=name,
                records=backlog,
            )
        self.delivery.start()
        logs.event(
            self.log,
            logging.INFO,
            "agent starting",
            version=__version__,
            endpoint=self.config.imds.endpoint,
            api_version=self.config.imds.api_version,
            sinks=self.delivery.names,
            state_dir=str(self.state_dir),
        )
        self.write_status()  # `status` says STARTING from the first second, not MISSING
        try:
            self._start_metrics()
            if self.kube is not None:  # the node's pool and cluster, before the first row
                self.kube.on_node = self.identity.node_known  # also if read again later
                self.kube.connect()
            # One quick attempt at the instance document first (bounded by imds.timeout), so the
            # first records, the start heartbeat and the policy's view of open events carry the
            # VM's identity when it answers; then it is a chore like the others.
            self._identity_chore.first_in = self.identity.refresh()
            self.actions.start(self.recorder)  # before the first poll: it picks up open events
            if self.kube is not None:
                self.kube.start(self.recorder)
            self.heartbeats.send("start")
            self.loop.run()
        finally:
            self._shutdown()
        return 0

    def request_stop(self) -> None:
        """From a signal handler: stop, and cut a blocking IMDS call short (the first one may
        otherwise wait 120 s, longer than the service manager's stop timeout)."""
        self.stop.set()
        self.client.abort()

    def _shutdown(self) -> None:
        try:
            self.actions.stop()  # hooks have a grace of their own (Actions.stop)
            if self.kube is not None:
                self.kube.stop()
            flush_until = self.clock.monotonic() + self.config.agent.stop_flush_seconds
            self.recorder.release_held()  # with what is known: never left behind at a stop
            self.recorder.checkpoint()
            self.heartbeats.send("stop")
            # send what is waiting, then abort what is still sending: stop_flush_seconds in all
            busy = self.delivery.flush(max(0.0, flush_until - self.clock.monotonic()))
            if busy:
                logs.event(
                    self.log,
                    logging.WARNING,
                    "sink still sending at exit; its records stay "
                    "in the outbox and are sent again at the next start",
                    sinks=busy,
                )
            self.write_status(stopped=True)
            if self.metrics is not None:
                self._metrics_textfile()
                self.metrics.stop()
        finally:
            self.client.close()
            self.status_file.close()
            if not self.delivery.alive():  # a live worker still holds the store
                self.store.close()
            logs.event(self.log, logging.INFO, "agent stopped", polls=self.recorder.stats.polls)

    # -- wiring -------------------------------------------------------------------------------

    def _vm(self) -> VmIdentity:
        return self.identity.vm

    def _identity_changed(self, vm: VmIdentity) -> None:
        self.recorder.identify(vm)
        self.actions.identified()  # open events it could not judge without the VM's name
        if self.kube is not None:
            self.kube.identified()

    def _on_records(self, records: list[LifecycleRecord]) -> None:
        self.delivery.notify()
        self.actions.on_records(records)
        if self.kube is not None:
            self.kube.on_records(records)
        if self._user_on_records is not None:
            self._user_on_records(records)

    def _kube(self) -> KubeActions | None:
        """On a Kubernetes node only (lightkube is imported then)."""
        if self.config.kubernetes is None:
            return None
        from .kube import build

        return build(
            self.config.kubernetes,
            self.store,
            self.config.imds,
            self.client.limiter,
            self.clock,
            wake=self.delivery.notify,
        )

    def snapshot(self, *, stopped: bool = False) -> Snapshot:
        return self.health.snapshot(stopped=stopped)

    def build_heartbeat(self, reason: str) -> Heartbeat:
        return self.heartbeats.build(reason)

    def write_status(self, *, stopped: bool = False) -> None:
        self.status_file.write(lambda: self.health.snapshot(stopped=stopped))

    # -- metrics (prometheus-client is imported only when [metrics] is configured) ------------

    def _metrics(self) -> Exporter | None:
        if not self.config.metrics.enabled:
            return None
        from .metrics.exporter import Exporter

        return Exporter(
            self.config.metrics, self.health.snapshot, lambda: dict(self.recorder.stats.records)
        )

    def _start_metrics(self) -> None:
        if self.metrics is None:
            return
        try:
            self.metrics.start()
        except OSError as exc:  # the port is taken: say so, and keep watching maintenance
            logs.event(
                self.log,
                logging.ERROR,
                "cannot serve metrics; the textfile (if any) is still written",
                listen=self.config.metrics.listen,
                error=str(exc),
            )

    def _metrics_textfile(self) -> None:
        """Said once per cause, not at every rewrite (and again once it works)."""
        assert self.metrics is not None
        try:
            self.metrics.write_textfile()
        except OSError as exc:
            if str(exc) != self._textfile_error:
                logs.event(
                    self.log,
                    logging.WARNING,
                    "cannot write the metrics textfile",
                    path=str(self.config.metrics.textfile),
                    error=str(exc),
                )
            self._textfile_error = str(exc)
            return
        if self._textfile_error is not None:
            logs.event(
                self.log,
                logging.INFO,
                "metrics textfile written again",
                path=str(self.config.metrics.textfile),
            )
            self._textfile_error = None
