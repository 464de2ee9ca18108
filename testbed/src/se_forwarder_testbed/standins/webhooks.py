"""Incoming webhooks that answer like Slack's and Microsoft Teams' (Workflows), over HTTPS.

``https://127.0.0.1:PORT/slack/<token>``, ``/teams/<token>`` and ``/json/<token>`` (any JSON).
What the real services answer, and so this stand-in:

======  ==========================================================  ==========================
status  when                                                        body
======  ==========================================================  ==========================
200     Slack: a JSON object with a non-empty ``text`` (or          ``ok``
        ``blocks``); json: any JSON
202     Teams: ``{"type": "message", "attachments": [{"contentType":
        "application/vnd.microsoft.card.adaptive", "content":
        {"type": "AdaptiveCard", ...}}]}``
400     a payload that is not that                                  ``invalid_payload`` /
                                                                    ``InvalidRequestContent``
404     an unknown path or token (a deleted webhook)                ``no_service``
410     ``answer_all(410)``: the channel was archived               ``channel_is_archived``
429     ``script(429, ...)``: rate limited, with ``Retry-After``    ``rate_limited``
5xx     ``script(500)``                                             ``internal_error``
======  ==========================================================  ==========================

``GET /_standin/received`` answers what was received, as JSON (``[{"kind", "status", "body"}]``).
Tests trust the generated CA (``ca_cert``), never ``verify=False``. ``se-forwarder standin
webhook`` runs it in the foreground.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

from .served import Served
from .tls import generate

ADAPTIVE_CARD = "application/vnd.microsoft.card.adaptive"
TOKEN = "T0STANDIN/B0STANDIN/c2VjcmV0LXdlYmhvb2sta2V5"  # the secret part of every URL
TEXTS = {
    200: "ok",
    400: "invalid_payload",
    404: "no_service",
    410: "channel_is_archived",
    429: "rate_limited",
    500: "internal_error",
    503: "service_unavailable",
}


@dataclass(frozen=True)
class Received:
    kind: str  # slack, teams, json
    status: int
    body: Any  # the parsed JSON (None if it was not JSON)


def valid(kind: str, body: Any) -> bool:
    if kind == "json":
        return True
    if kind == "slack":
        text, blocks = (body.get("text"), body.get("blocks")) if isinstance(body, dict) else (0, 0)
        return (isinstance(text, str) and text.strip() != "") or isinstance(blocks, list)
    if not isinstance(body, dict) or body.get("type") != "message":
        return False
    atts = body.get("attachments")
    return (
        isinstance(atts, list)
        and bool(atts)
        and all(
            isinstance(a, dict)
            and a.get("contentType") == ADAPTIVE_CARD
            and isinstance(a.get("content"), dict)
            and a["content"].get("type") == "AdaptiveCard"
            for a in atts
        )
    )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read ``requests``
        pass

    def do_GET(self) -> None:
        if self.path != "/_standin/received":
            self._reply(404, b"no_service")
            return
        received = [
            {"kind": r.kind, "status": r.status, "body": r.body} for r in self.server.owner.requests
        ]
        self._reply(200, json.dumps(received).encode(), "application/json")

    def _reply(self, status: int, data: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        parts = self.path.strip("/").split("/", 1)
        kind = parts[0]
        known = len(parts) == 2 and parts[1] == TOKEN and kind in ("slack", "teams", "json")
        status, retry_after = self.server.owner.answer(kind, known, raw)
        text = TEXTS.get(status, "error")
        if kind == "teams" and status == 400:
            text = json.dumps(
                {
                    "error": {
                        "code": "InvalidRequestContent",
                        "message": "The request content is not valid",
                    }
                }
            )
        data = b"" if status == 202 else text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: WebhookStandIn


class WebhookStandIn(Served):
    def __init__(
        self,
        tls_dir: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        on_received: Callable[[Received], None] | None = None,
    ) -> None:
        self.tls = generate(tls_dir)
        self.on_received = on_received  # each request, once answered (the command logs it)
        self.host = host
        self._port = port
        self._lock = threading.Lock()
        self._script: deque[tuple[int, int | None]] = deque()
        self._all: int | None = None
        self._log: list[Received] = []
        self._server: _Server | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Self:
        server = _Server((self.host, self._port), _Handler)
        server.owner = self
        server.socket = self.tls.server_context().wrap_socket(server.socket, server_side=True)
        self._server = server
        threading.Thread(target=server.serve_forever, name="webhook-standin", daemon=True).start()
        return self

    @property
    def ca_cert(self) -> Path:
        return self.tls.ca_cert

    def url(self, kind: str) -> str:
        return f"https://{self.host}:{self.port}/{kind}/{TOKEN}"

    # -- behaviour ------------------------------------------------------------------------------

    def script(self, *answers: int | tuple[int, int]) -> None:
        """Answer the next requests with these statuses, in order (``(429, 2)``: Retry-After 2)."""
        with self._lock:
            for a in answers:
                self._script.append(a if isinstance(a, tuple) else (a, 1 if a == 429 else None))

    def answer_all(self, status: int | None = 410) -> None:
        """From now on answer every request with ``status`` (410: a channel archived, 404: a
        webhook deleted, 503: an outage); None: answer normally again."""
        with self._lock:
            self._all = status

    def answer(self, kind: str, known: bool, raw: bytes) -> tuple[int, int | None]:
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            body = None
        with self._lock:
            if self._all is not None:
                status, retry = self._all, None
            elif not known:
                status, retry = 404, None
            elif self._script:
                status, retry = self._script.popleft()
            elif body is None or not valid(kind, body):
                status, retry = 400, None
            else:
                status, retry = (202 if kind == "teams" else 200), None
            received = Received(kind, status, body)
            self._log.append(received)
        if self.on_received is not None:
            self.on_received(received)
        return status, retry

    @property
    def requests(self) -> list[Received]:
        with self._lock:
            return list(self._log)

    def accepted(self, kind: str | None = None) -> list[Any]:
        """The bodies answered 2xx, in arrival order."""
        return [
            r.body
            for r in self.requests
            if 200 <= r.status < 300 and (kind is None or r.kind == kind)
        ]
