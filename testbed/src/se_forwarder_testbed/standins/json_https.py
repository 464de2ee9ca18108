"""An HTTPS server of JSON answers, for the stand-ins of Azure's JSON APIs (Resource Graph, the
acknowledge API, Log Analytics queries): each POST handed to one function with its path, headers
and body; its status, headers and JSON written back."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .tls import TlsFiles

#: (path with its query, headers, body) -> (status, headers, JSON answer)
Answer = Callable[[str, Any, bytes], tuple[int, dict[str, str], Any]]


def serve_json(tls: TlsFiles, answer: Answer) -> ThreadingHTTPServer:
    """A started server on 127.0.0.1 (a free port), TLS with ``tls``'s certificate."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, headers, out = answer(self.path, self.headers, body)
            data = json.dumps(out).encode()
            self.send_response(status)
            for k, v in {**headers, "Content-Type": "application/json"}.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = tls.server_context().wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
