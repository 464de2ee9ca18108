"""``GET /_standin/records[?stream=S]`` and ``GET /_standin/stats``: what was accepted, as JSON,
without a token, to loopback clients only."""

from __future__ import annotations

import ipaddress
from typing import Any

from .answers import error
from .records import Records
from .server import Handler, Query


class Inspection:
    """Answers the GETs from what ``records`` holds."""

    def __init__(self, records: Records) -> None:
        self.records = records

    def get(self, h: Handler, path: str, query: Query) -> None:
        try:
            loopback = ipaddress.ip_address(h.client_address[0]).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            h.answer(403, error("Forbidden", "Stand-in queries are for loopback clients."))
        elif path == "/_standin/records":
            self._records(h, query.get("stream"))
        elif path == "/_standin/stats":
            h.answer(200, self.records.summary())
        else:
            h.answer(404, error("NotFound", f"No resource at '{path}'."))

    def _records(self, h: Handler, wanted: list[str] | None) -> None:
        if wanted and wanted[0] not in self.records.streams:
            h.answer(404, error("NotFound", f"Stream '{wanted[0]}' is not declared."))
            return
        names = [wanted[0]] if wanted else list(self.records.streams)
        out = self.records.by_stream(names)
        payload: dict[str, Any] = {"streams": out}
        if wanted:
            payload = {"stream": names[0], "count": len(out[names[0]]), "records": out[names[0]]}
        h.answer(200, payload)
