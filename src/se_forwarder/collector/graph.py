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
from collections.abc import Callable
from typing import Any

from azure.core.exceptions import HttpResponseError
from azure.mgmt.resourcegraph import ResourceGraphClient
from azure.mgmt.resourcegraph.models import QueryRequest, QueryRequestOptions

from .. import logs
from ..clock import SYSTEM
from ..delivery.backoff import parse_retry_after
from .config import CollectorConfig
from .graphrows import rows_of
from .writer import Writer

log = logs.get("collector")
QUERIES = {
    "maintenanceresources": "maintenanceresources "
                            "| where type =~ 'microsoft.maintenance/scheduledevents'",
    "healthresources": "healthresources "
                       "| where type =~ 'microsoft.resourcehealth/resourceannotations'",
}
PAGE = 1000


def quota_wait(headers: Any) -> float:
    """Seconds to wait before the next query: the reset time when no quota is left."""
    remaining = headers.get("x-ms-user-quota-remaining") if headers else None
    if remaining is None or int(remaining) > 0:
        return 0.0
    h, m, s = (headers.get("x-ms-user-quota-resets-after") or "00:00:01").split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


class GraphChannel:
    def __init__(self, cfg: CollectorConfig, credential: Any, writer: Writer,
                 notify: Callable[[], None]) -> None:
        self.cfg = cfg
        self.writer = writer
        self.notify = notify
        kw: dict[str, Any] = {"retry_total": 0}  # throttling is handled here, with its headers
        if cfg.resource_graph_ca_file:
            kw["connection_verify"] = str(cfg.resource_graph_ca_file)
        self.client = ResourceGraphClient(credential, base_url=cfg.resource_graph_endpoint, **kw)
        self.queries = 0
        self.throttled = 0
        self.problems = 0

    def run(self, stop: threading.Event, once: bool = False) -> None:
        interval = self.cfg.resource_graph_interval or 300.0
        while not stop.is_set():
            try:
                self.one_pass(stop)
            except HttpResponseError as exc:
                logs.event(log, logging.WARNING, "Resource Graph query failed; next pass later",
                           status=exc.status_code, error=" ".join(str(exc).split())[:300])
            if once:
                return
            SYSTEM.wait(stop, interval)

    def one_pass(self, stop: threading.Event) -> int:
        """Every page of both tables; returns the rows committed."""
        committed = 0
        for table, query in QUERIES.items():
            skip: str | None = None
            while not stop.is_set():
                rows, skip = self._page(query, skip, stop)
                parsed = rows_of(table, rows, SYSTEM.wall_ms())
                for problem in parsed.problems:
                    logs.event(log, logging.WARNING, "unreadable Resource Graph row skipped",
                               table=table, error=problem[:300])
                self.problems += len(parsed.problems)
                committed += self.writer.write(parsed.notifications)
                self.notify()
                if not skip:
                    break
        return committed

    def _page(self, query: str, skip: str | None, stop: threading.Event
              ) -> tuple[list[dict[str, Any]], str | None]:
        while True:
            headers: dict[str, str] = {}
            request = QueryRequest(subscriptions=self.cfg.subscriptions or None, query=query,
                                   options=QueryRequestOptions(skip_token=skip, top=PAGE,
                                                               result_format="objectArray"))
            try:
                self.queries += 1
                result = self.client.resources(
                    request, cls=lambda resp, body, hdrs: (body, resp.http_response.headers))
            except HttpResponseError as exc:
                if exc.status_code != 429:
                    raise
                self.throttled += 1
                wait = parse_retry_after(exc.response.headers if exc.response else None) or \
                    quota_wait(exc.response.headers if exc.response else None) or 5.0
                logs.event(log, logging.WARNING, "Resource Graph throttled (429); waiting",
                           seconds=wait)
                if SYSTEM.wait(stop, wait):
                    return [], None
                continue
            body, headers = result
            wait = quota_wait(headers)
            if wait:
                self.throttled += 1
                SYSTEM.wait(stop, wait)
            data = body.data if isinstance(body.data, list) else []
            return data, body.skip_token
