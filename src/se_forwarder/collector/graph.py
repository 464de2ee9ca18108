"""The Resource Graph channel: ``maintenanceresources`` (Scheduled Events) and ``healthresources``
(Resource Health annotations) read with ``azure-mgmt-resourcegraph``, for subscriptions without
the Event Grid channel, or as a backfill.

Paging follows ``$skipToken``. Throttling is Resource Graph's own: every answer says how many
queries the identity has left (``x-ms-user-quota-remaining``) and when the window resets
(``x-ms-user-quota-resets-after``, ``hh:mm:ss``); at 0 the channel waits for the reset before the
next query, and a 429 waits for its ``Retry-After``. Rows already committed are dropped by the
writer (same RecordId), so a pass every few minutes writes only what changed.
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
from .graphrows import rows_of
from .stats import GraphStats
from .writer import Writer

log = logs.get("collector")
QUERIES = {
    "maintenanceresources": "maintenanceresources "
    "| where type =~ 'microsoft.maintenance/scheduledevents'",
    "healthresources": "healthresources "
    "| where type =~ 'microsoft.resourcehealth/resourceannotations'",
}
PAGE = 1000
DEFAULT_INTERVAL = 300.0  # seconds between passes without resource_graph_interval


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
    ) -> None:
        self.cfg = cfg
        self.writer = writer
        self.notify = notify
        self.clock = clock
        self.stats = GraphStats()
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
                self.one_pass(stop)
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

    def one_pass(self, stop: threading.Event) -> int:
        """Every page of both tables; returns the rows committed."""
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
                committed += self.writer.write(parsed.notifications)
                self.notify()
                if not skip:
                    break
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
