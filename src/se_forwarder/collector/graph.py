"""The Resource Graph channel: ``maintenanceresources`` (Scheduled Events) and ``healthresources``
(Resource Health annotations) read with ``azure-mgmt-resourcegraph``, for subscriptions without
the Event Grid channel, or as a backfill.

Paging follows ``$skipToken``. Throttling is Resource Graph's own: every answer says how many
queries the identity has left (``x-ms-user-quota-remaining``) and when the window resets
(``x-ms-user-quota-resets-after``, ``hh:mm:ss``); at 0 the channel waits for the reset before the
next query, and a 429 waits for its ``Retry-After``. Rows already committed are dropped by the
writer (same RecordId), so a pass every few minutes writes only what changed.

Beside the Event Hub (``settle`` > 0), a status first read here waits ``settle`` seconds before it
is written: after a downtime the first pass reads each event's latest status at the read time,
and Event Grid's backlog then brings the same facts with Azure's own time; the copy committed
first wins, so Event Grid's must come first. What Event Grid never delivers is written after the
wait. Every ``inventory_interval`` seconds a pass also lists what exists (``INVENTORY``): one
Inventory row per VM and, once every page of a subscription was read, its InventoryPass row.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, cast

from azure.core.exceptions import HttpResponseError
from azure.mgmt.resourcegraph import ResourceGraphClient
from azure.mgmt.resourcegraph.models import QueryRequest, QueryRequestOptions, QueryResponse

from .. import logs
from ..backoff import headers_of, parse_retry_after
from ..clock import Clock
from ..errors import StateError
from .config import CollectorConfig
from .graphrows import inventory_of, rows_of
from .record import InventoryVm, PlatformRecord, inventory_rows, restated
from .stats import GraphStats
from .writer import Writer

log = logs.get("collector")
QUERIES = {
    "maintenanceresources": "maintenanceresources "
    "| where type =~ 'microsoft.maintenance/scheduledevents'",
    "healthresources": "healthresources "
    "| where type =~ 'microsoft.resourcehealth/resourceannotations'",
}
INVENTORY = {
    "resources": "resources | where type =~ 'microsoft.compute/virtualmachines'",
    "computeresources": "computeresources "
    "| where type =~ 'microsoft.compute/virtualmachinescalesets/virtualmachines'",
}
PAGE = 1000
DEFAULT_INTERVAL = 300.0  # seconds between passes without resource_graph_interval
HELD_MAX = 200_000  # statuses held for settle at most (the oldest are written first past it)


class Settling:
    """Resource Graph statuses held back for ``settle_ms`` so that Event Grid's copy of the same
    fact (same RecordId, Azure's own time) is committed first; annotations carry Azure's own time
    and pass at once. Bounded: past ``HELD_MAX`` the oldest are released."""

    def __init__(self, settle_ms: int) -> None:
        self.settle_ms = settle_ms
        #: RecordId -> (first read, ms; the row)
        self.held: dict[str, tuple[int, PlatformRecord]] = {}

    def take(
        self,
        notifications: list[tuple[str | None, list[PlatformRecord]]],
        now_ms: int,
        flush: bool = False,
    ) -> list[tuple[str | None, list[PlatformRecord]]]:
        """What may be written now: everything without a settle time; else the annotations and
        the statuses first read ``settle_ms`` ago or more (all of them with ``flush``)."""
        if self.settle_ms <= 0:
            return notifications
        out: list[PlatformRecord] = []
        for _, rows in notifications:
            for row in rows:
                if row.EventStatus is None:
                    out.append(row)
                elif row.RecordId not in self.held:
                    self.held[row.RecordId] = (now_ms, row)
        over = len(self.held) - HELD_MAX
        due = [
            k
            for i, (k, (at, _)) in enumerate(self.held.items())
            if flush or now_ms - at >= self.settle_ms or i < over
        ]
        out.extend(self.held.pop(k)[1] for k in due)
        return [(None, out)] if out else []


def restatements(
    notifications: list[tuple[str | None, list[PlatformRecord]]],
    committed: Callable[[str], bool],
    now_ms: int,
) -> list[tuple[str | None, list[PlatformRecord]]]:
    """The Scheduled statuses read again that were already written: each stated again for the
    day (one RecordId a day: the writer drops the other passes' copies)."""
    again = [
        restated(row, now_ms)
        for _, rows in notifications
        for row in rows
        if row.EventStatus == "Scheduled" and committed(row.RecordId)
    ]
    return [(None, again)] if again else []


def quota_wait(headers: Any) -> float:
    """Seconds to wait before the next query: the reset time when no quota is left."""
    remaining = headers.get("x-ms-user-quota-remaining") if headers else None
    if remaining is None or int(remaining) > 0:
        return 0.0
    h, m, s = (headers.get("x-ms-user-quota-resets-after") or "00:00:01").split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


class GraphChannel:
    def __init__(
        self,
        cfg: CollectorConfig,
        credential: Any,
        writer: Writer,
        notify: Callable[[], None],
        clock: Clock,
        settle: float = 0.0,
    ) -> None:
        self.cfg = cfg
        self.writer = writer
        self.notify = notify
        self.clock = clock
        self.settling = Settling(int(settle * 1000))
        self.stats = GraphStats()
        self._inventory_at: float | None = None
        # handed the VMs of each complete inventory pass (the collector's approvals)
        self.on_inventory: Callable[[list[InventoryVm]], None] | None = None
        kw: dict[str, Any] = {"retry_total": 0}  # throttling is handled here, with its headers
        if cfg.resource_graph_ca_file:
            kw["connection_verify"] = str(cfg.resource_graph_ca_file)
        self.client = ResourceGraphClient(credential, base_url=cfg.resource_graph_endpoint, **kw)

    @property
    def interval(self) -> float:
        return self.cfg.resource_graph_interval or DEFAULT_INTERVAL

    def run(self, stop: threading.Event, once: bool = False) -> None:
        """Passes every ``interval`` seconds until ``stop`` (one with ``once``). A failed pass
        (the service, or the state directory) is logged and counted; the next one tries again."""
        while not stop.is_set():
            error = None
            try:
                self.one_pass(stop, flush=once)
                self.inventory_pass(stop, force=once)
            except HttpResponseError as exc:
                error = f"HTTP {exc.status_code}: {' '.join(str(exc).split())[:300]}"
                logs.event(
                    log,
                    logging.WARNING,
                    "Resource Graph query failed; next pass later",
                    status=exc.status_code,
                    error=error,
                )
            except StateError as exc:  # the writer logged it
                error = str(exc)
            self._ended(error)
            if once:
                return
            self.clock.wait(stop, self.interval)

    def _ended(self, error: str | None) -> None:
        st = self.stats
        st.last_pass_at, st.last_pass_ok, st.last_pass_error = (
            self.clock.wall_seconds(),
            error is None,
            error,
        )
        if error is None:
            st.graph_passes += 1

    def one_pass(self, stop: threading.Event, flush: bool = False) -> int:
        """Every page of both tables; returns the rows committed (with ``flush``, every held
        status too)."""
        committed = 0
        for table, query in QUERIES.items():
            skip: str | None = None
            while not stop.is_set():
                rows, skip = self._page(query, skip, stop)
                parsed = rows_of(table, rows, self.clock.wall_ms())
                for problem in parsed.problems:
                    logs.event(
                        log,
                        logging.WARNING,
                        "unreadable Resource Graph row skipped",
                        table=table,
                        error=problem[:300],
                    )
                self.stats.add(parsed)
                notifications = parsed.notifications + self._restated(parsed.notifications)
                committed += self.writer.write(self._settled(notifications, flush))
                self.notify()
                if not skip:
                    break
        committed += self.writer.write(self._settled([], flush))
        self.notify()
        return committed

    def _restated(
        self, notifications: list[tuple[str | None, list[PlatformRecord]]]
    ) -> list[tuple[str | None, list[PlatformRecord]]]:
        """A Scheduled status already written, still Scheduled: stated again, once a day, so a log
        alert's 2-day range holds every event announced days ahead (``record.restated``)."""
        return restatements(notifications, self.writer.committed, self.clock.wall_ms())

    def _settled(
        self, notifications: list[tuple[str | None, list[PlatformRecord]]], flush: bool
    ) -> list[tuple[str | None, list[PlatformRecord]]]:
        out = self.settling.take(notifications, self.clock.wall_ms(), flush)
        self.stats.graph_held = len(self.settling.held)
        return out

    def inventory_pass(self, stop: threading.Event, force: bool = False) -> int:
        """What exists, every ``inventory_interval`` seconds: returns the rows committed. A
        subscription gets its InventoryPass row only when every page was read (a pass cut short
        by a stop or an error marks nothing as gone)."""
        every = self.cfg.inventory_interval
        now = self.clock.monotonic()
        if not every or (
            not force and self._inventory_at is not None and now - self._inventory_at < every
        ):
            return 0
        rows: list[dict[str, Any]] = []
        for query in INVENTORY.values():
            skip: str | None = None
            while True:
                if stop.is_set():
                    return 0
                page, skip = self._page(query, skip, stop)
                rows.extend(page)
                if not skip:
                    break
        by_sub, problems = inventory_of(rows)
        for problem in problems:
            logs.event(log, logging.WARNING, "unreadable inventory row skipped", error=problem)
        self.stats.parse_failures += len(problems)
        when = self.clock.wall_ms()
        subs = [s.lower() for s in self.cfg.subscriptions] or sorted(by_sub)
        if self.on_inventory is not None:
            self.on_inventory([vm for sub in subs for vm in by_sub.get(sub, [])])
        records = [r for sub in subs for r in inventory_rows(sub, by_sub.get(sub, []), when)]
        committed = self.writer.write([(None, records)])
        self.notify()
        self._inventory_at = now
        self.stats.inventory_passes += 1
        self.stats.inventory_vms = sum(len(by_sub.get(sub, [])) for sub in subs)
        return committed

    def _page(
        self, query: str, skip: str | None, stop: threading.Event
    ) -> tuple[list[dict[str, Any]], str | None]:
        while True:
            request = QueryRequest(
                subscriptions=self.cfg.subscriptions or None,
                query=query,
                options=QueryRequestOptions(skip_token=skip, top=PAGE, result_format="objectArray"),
            )
            try:
                self.stats.graph_queries += 1
                # ``cls`` makes the call return what it returns (the SDK types the plain answer)
                result = cast(
                    "tuple[QueryResponse, Mapping[str, str]]",
                    self.client.resources(
                        request, cls=lambda resp, body, hdrs: (body, resp.http_response.headers)
                    ),
                )
            except HttpResponseError as exc:
                if exc.status_code != 429:
                    raise
                headers = headers_of(exc.response)
                wait = parse_retry_after(headers) or quota_wait(headers) or 5.0
                logs.event(
                    log, logging.WARNING, "Resource Graph throttled (429); waiting", seconds=wait
                )
                if self._wait(stop, wait):
                    return [], None
                continue
            body, headers = result
            wait = quota_wait(headers)
            if wait and self._wait(stop, wait):
                return [], None
            rows: object = body.data  # a list in the objectArray format asked for
            data: list[Any] = rows if isinstance(rows, list) else []
            return data, body.skip_token

    def _wait(self, stop: threading.Event, seconds: float) -> bool:
        """Throttled: wait ``seconds`` (the service's own); True if stopped meanwhile."""
        self.stats.graph_throttled += 1
        return self.clock.wait(stop, seconds)
