"""The HTTPS plumbing: a threading server whose connections speak TLS only, and a handler that
routes ``POST /dataCollectionRules/{id}/streams/{stream}`` and ``GET`` to the stand-in, reads
bodies with a Content-Length only, answers JSON, or drops the connection."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
import struct
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from .answers import error

log = logging.getLogger(__name__)

READ_CAP = 64 * 1024 * 1024  # a declared body larger than this is not even read

Query = dict[str, list[str]]
Post = Callable[["Handler", str, str, Query, bytes], None]  # handler, DCR id, stream, query, body
Get = Callable[["Handler", str, Query], None]  # handler, path, query


class TlsServer(ThreadingHTTPServer):
    """ThreadingHTTPServer whose connections speak TLS only; the handshake runs in the connection's
    own thread, so a slow or plain-text client never holds up the accept loop."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        context: ssl.SSLContext,
        *,
        post: Post,
        get: Get,
        max_body_bytes: int,
    ) -> None:
        self.ssl_context = context
        self.post, self.get = post, get
        self.max_body_bytes = max_body_bytes  # named in the answer to a body too large to read
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, Handler)

    def finish_request(self, request: socket.socket, client_address: Any) -> None:  # type: ignore[override]
        request.settimeout(10)
        try:
            conn = self.ssl_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("TLS handshake with %s failed: %s", client_address, exc)
            return
        conn.settimeout(None)
        with self._open_lock:
            self._open.add(conn)
        try:
            Handler(conn, client_address, self)  # the RequestHandlerClass given to __init__
        except (ssl.SSLError, OSError) as exc:
            log.debug("connection with %s ended: %s", client_address, exc)
        finally:
            with self._open_lock:
                self._open.discard(conn)
            _close(conn)

    def close_connections(self) -> None:
        with self._open_lock:
            conns = list(self._open)
        for conn in conns:
            _close(conn)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "se-forwarder-logs-ingestion-standin"
    sys_version = ""
    timeout = 60  # idle keep-alive connections are closed after this

    server: TlsServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        parts = url.path.split("/")
        # "", "dataCollectionRules", {id}, "streams", {stream}
        if (
            len(parts) != 5
            or parts[1] != "dataCollectionRules"
            or parts[3] != "streams"
            or not parts[2]
            or not parts[4]
        ):
            self._discard_body()
            self.answer(404, error("NotFound", f"No resource at '{url.path}'."))
            return
        body = self._read_body()
        if body is None:
            return
        self.server.post(self, unquote(parts[2]), unquote(parts[4]), parse_qs(url.query), body)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        self.server.get(self, url.path, parse_qs(url.query))

    def _not_allowed(self) -> None:
        self._discard_body()
        self.answer(
            405,
            error("MethodNotAllowed", f"Method {self.command} is not allowed; use POST."),
            {"Allow": "POST"},
        )

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _not_allowed

    def _read_body(self) -> bytes | None:
        """The body, by its Content-Length; None when refused (answered, connection to close)."""
        if self.headers.get("Transfer-Encoding"):
            self._refuse(411, "LengthRequired", "Send the body with a Content-Length.")
            return None
        try:
            length = int(self.headers.get("Content-Length", ""))
            if length < 0:
                raise ValueError
        except ValueError:
            self._refuse(411, "LengthRequired", "A valid Content-Length is required.")
            return None
        if length > READ_CAP:
            self._refuse(
                413,
                "ContentLengthLimitExceeded",
                f"The request body is {length} bytes; the maximum is "
                f"{self.server.max_body_bytes} bytes per call.",
            )
            return None
        return self.rfile.read(length)

    def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer without reading the body, and close the connection (its rest is unread)."""
        self.close_connection = True
        self.answer(status, error(code, message), {"Connection": "close"})

    def _discard_body(self) -> None:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = 0
        if 0 < length <= READ_CAP:
            self.rfile.read(length)
        elif length or self.headers.get("Transfer-Encoding"):
            self.close_connection = True

    def answer(
        self, status: int, payload: dict[str, Any] | None, headers: dict[str, str] | None = None
    ) -> None:
        body = b"" if payload is None else json.dumps(payload).encode("utf-8")
        try:
            self.send_response(status)
            if payload is not None:
                self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("x-ms-request-id", str(uuid.uuid4()))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            if body:
                self.wfile.write(body)
        except OSError as exc:  # the client went away (e.g. timed out on a slow answer)
            log.debug("answer %s to %s not delivered: %s", status, self.client_address, exc)
            self.close_connection = True

    def drop(self) -> None:
        """Close the connection without a word (an injected fault)."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _close(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        conn.close()
