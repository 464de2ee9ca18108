"""The Log Analytics query API (``POST /v1/workspaces/{id}/query``) for the collector's view of
which VMs run an agent, for the unmodified azure-monitor-query ``LogsQueryClient``.

As the service: a bearer token for ``https://api.loganalytics.io`` from the
:class:`~se_forwarder_testbed.standins.tokens.TokenAuthority` (else 401); an unknown workspace is
404 ``WorkspaceNotFound``; the answer is ``{"tables": [{"name": "PrimaryResult", "columns":
[...], "rows": [...]}]}``. What it does not: evaluate KQL. It answers the collector's one query
(the agents' VMs with a heartbeat within ``ago(Nh)``) from the heartbeat rows ``heartbeats``
returns, e.g. what the Logs Ingestion stand-in accepted on the agents' stream.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any, Self

from se_forwarder.clock import SYSTEM, Clock
from se_forwarder.timefmt import parse_iso_ms

from .json_https import serve_json
from .served import Served
from .tls import TlsFiles
from .tokens import InvalidToken, TokenAuthority

LOGS_AUDIENCE = "https://api.loganalytics.io"
_AGO = re.compile(r"ago\((\d+(?:\.\d+)?)h\)")
COLUMNS = ("SubscriptionId", "ResourceGroup", "VmName")


class LogQueryStandIn(Served):
    def __init__(
        self,
        tls: TlsFiles,
        authority: TokenAuthority,
        workspace_id: str,
        heartbeats: Callable[[], list[dict[str, Any]]],
        *,
        clock: Clock = SYSTEM,
    ) -> None:
        self.tls, self.authority, self.workspace_id = tls, authority, workspace_id
        self.heartbeats, self.clock = heartbeats, clock
        self.fail_with: int | None = None  # answer every query with this status (an outage)
        self.queries: list[str] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self._server = serve_json(self.tls, self.answer)
        return self

    def answer(self, path: str, headers: Any, body: bytes) -> tuple[int, dict[str, str], Any]:
        m = re.match(r"^/v1/workspaces/([^/?]+)/query", path)
        if m is None:
            return 404, {}, {"error": {"code": "PathNotFound", "message": path}}
        try:
            self.authority.verify(
                (headers.get("Authorization") or "").removeprefix("Bearer "), LOGS_AUDIENCE
            )
        except InvalidToken as exc:
            return 401, {}, {"error": {"code": "InvalidTokenError", "message": str(exc)}}
        if m.group(1) != self.workspace_id:
            return 404, {}, {"error": {"code": "WorkspaceNotFound", "message": m.group(1)}}
        if self.fail_with is not None:
            return self.fail_with, {}, {"error": {"code": "ServiceUnavailable", "message": "down"}}
        query = str(json.loads(body).get("query", ""))
        self.queries.append(query)
        hours = _AGO.search(query)
        since = self.clock.wall_ms() - int(float(hours.group(1)) * 3_600_000) if hours else 0
        rows = sorted(
            {
                tuple(str(r.get(c) or "").lower() for c in COLUMNS)
                for r in self.heartbeats()
                if parse_iso_ms(str(r["TimeGenerated"])) > since
            }
        )
        return (
            200,
            {},
            {
                "tables": [
                    {
                        "name": "PrimaryResult",
                        "columns": [{"name": c, "type": "string"} for c in COLUMNS],
                        "rows": [list(r) for r in rows],
                    }
                ]
            },
        )
