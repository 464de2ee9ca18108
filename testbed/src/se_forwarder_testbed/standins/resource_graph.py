"""A small Azure Resource Graph for the collector's tests: ``POST
/providers/Microsoft.ResourceGraph/resources?api-version=…`` over HTTPS, as the real service
answers it, for the unmodified ``azure-mgmt-resourcegraph`` client.

What it does as the service does: a bearer token for ``https://management.azure.com`` (from the
:class:`~se_forwarder_testbed.standins.tokens.TokenAuthority`) or 401; paging with ``$top`` and
an opaque ``$skipToken``; the per-user quota (``quota`` queries per ``window`` seconds) told in
``x-ms-user-quota-remaining`` and ``x-ms-user-quota-resets-after`` on every answer, and a 429
with ``Retry-After`` past it. What it does not: evaluate KQL. It serves the rows of the table a
query starts with, filtered by the one ``where type =~ '…'`` the collector's queries carry.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any, Self

from se_forwarder.clock import SYSTEM, Clock

from .json_https import serve_json
from .tls import TlsFiles
from .tokens import InvalidToken, TokenAuthority

ARM_AUDIENCE = "https://management.azure.com"
_TYPE = re.compile(r"where\s+type\s*=~\s*'([^']+)'", re.IGNORECASE)


class ResourceGraphStandIn:
    def __init__(
        self,
        tls: TlsFiles,
        authority: TokenAuthority,
        *,
        quota: int = 15,
        window: float = 5.0,
        clock: Clock = SYSTEM,
    ) -> None:
        """``clock``: the quota window's time (a test's FakeClock: the window resets as the
        collector waits for it in fake time)."""
        self.tls, self.authority, self.clock = tls, authority, clock
        self.quota, self.window = quota, window
        self.tables: dict[str, list[dict[str, Any]]] = {}
        self.requests: list[dict[str, Any]] = []
        self.throttled = 0
        self._window_start = clock.monotonic()
        self._used = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Self:
        self._server = serve_json(self.tls, self.answer)
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def spend(self, queries: int) -> None:
        """``queries`` from another client of the same identity: they share its quota."""
        for _ in range(queries):
            self._quota()

    def _quota(self) -> tuple[int, float]:
        """(queries left after this one, seconds to the reset); -1 left: refused."""
        with self._lock:
            now = self.clock.monotonic()
            if now - self._window_start >= self.window:
                self._window_start, self._used = now, 0
            self._used += 1
            return self.quota - self._used, self.window - (now - self._window_start)

    def answer(self, path: str, headers: Any, body: bytes) -> tuple[int, dict[str, str], Any]:
        if not path.startswith("/providers/Microsoft.ResourceGraph/resources?api-version="):
            return 404, {}, {"error": {"code": "NotFound", "message": path}}
        try:
            self.authority.verify(
                (headers.get("Authorization") or "").removeprefix("Bearer "), ARM_AUDIENCE
            )
        except InvalidToken as exc:
            return 401, {}, {"error": {"code": "InvalidAuthenticationToken", "message": str(exc)}}
        left, reset = self._quota()
        quota = {
            "x-ms-user-quota-remaining": str(max(left, 0)),
            "x-ms-user-quota-resets-after": time.strftime("%H:%M:%S", time.gmtime(reset + 1)),
        }
        if left < 0:
            self.throttled += 1
            return (
                429,
                {**quota, "Retry-After": str(int(reset) + 1)},
                {
                    "error": {
                        "code": "RateLimiting",
                        "message": "Please provide below info when asking for "
                        "support: too many requests.",
                    }
                },
            )
        request = json.loads(body)
        self.requests.append(request)
        query = request.get("query", "")
        table = query.split("|", 1)[0].strip().lower()
        m = _TYPE.search(query)
        rows = [
            r
            for r in self.tables.get(table, [])
            if m is None or str(r.get("type", "")).lower() == m.group(1).lower()
        ]
        options = request.get("options") or {}
        start = int(base64.b64decode(options["$skipToken"])) if options.get("$skipToken") else 0
        top = int(options.get("$top") or 1000)
        page = rows[start : start + top]
        nxt = start + top
        out = {
            "totalRecords": len(rows),
            "count": len(page),
            "resultTruncated": "false",
            "data": page,
            "facets": [],
        }
        if nxt < len(rows):
            out["$skipToken"] = base64.b64encode(str(nxt).encode()).decode()
        return 200, quota, out
