"""The simulated IMDS on the wire: the HTTP/1.1 server and the answers to each path (Scheduled
Events, approvals, the instance document, managed-identity tokens), held to the real service's
rules (Metadata header, api-versions, X-Forwarded-For refusal, the throttle)."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from . import instance
from .script import ScriptClock
from .wire import (
    IDENTITY_VERSIONS,
    INSTANCE_PATH,
    INSTANCE_VERSIONS,
    SCHEDULED_EVENTS_VERSIONS,
    SE_PATH,
    TOKEN_LIFETIME,
    TOKEN_PATH,
    Fault,
    RequestRecord,
    log,
    render_event,
    rfc1123,
)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "IMDS-Simulator"
    sys_version = ""
    sim: HttpEndpoints  # the simulator (set per simulator on a subclass of this handler)

    def setup(self) -> None:
        super().setup()
        # Without this, Nagle's algorithm and the client's delayed ACK add ~40 ms to polls.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sim._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.sim._track(self.connection, False)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the stdlib's own line; the simulator logs each request itself."""

    def do_GET(self) -> None:
        self.sim._dispatch(self, "GET")

    def do_POST(self) -> None:
        self.sim._dispatch(self, "POST")

    def do_PUT(self) -> None:
        self.sim._dispatch(self, "PUT")

    def do_DELETE(self) -> None:
        self.sim._dispatch(self, "DELETE")

    def do_PATCH(self) -> None:
        self.sim._dispatch(self, "PATCH")

    def do_HEAD(self) -> None:
        self.sim._dispatch(self, "HEAD")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # idle keep-alive connections must not hold up stop()


class HttpEndpoints(ScriptClock):
    """The answering half of ``Simulator``: each path's answer from the clock half's document."""

    def instance_document(self) -> dict[str, Any]:
        """``/metadata/instance`` as the real service shapes it (domains as strings, like IMDS)."""
        return instance.document(self.scenario.vm)

    def _rate_limited(self) -> bool:
        if self._limiter is None:
            return False
        with self._cond:
            return not self._limiter.allow(self.clock.monotonic())

    def _record(self, h: _Handler, method: str, status: int | None) -> None:
        rec = RequestRecord(
            self.clock.wall_seconds(),
            method,
            h.path,
            dict(h.headers.items()),
            status,
            h.client_address[1],
        )
        with self._cond:
            self._requests.append(rec)
        log.info(
            '%s "%s %s" %s',
            h.client_address[0],
            method,
            h.path,
            status if status is not None else "dropped",
        )

    def _send(
        self,
        h: _Handler,
        method: str,
        status: int,
        body: bytes | None,
        content_type: str = "application/json; charset=utf-8",
    ) -> None:
        self._record(h, method, status)  # before answering: a client may look right after
        head = [
            f"{h.protocol_version} {status} {HTTPStatus(status).phrase}",
            f"Server: {h.version_string()}",
            f"Date: {rfc1123(self.clock.wall_seconds())}",  # Azure's clock: NotBefore's
        ]
        if body:
            head.append(f"Content-Type: {content_type}")
        head.append(f"Content-Length: {len(body or b'')}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        if body and method != "HEAD":
            data += body
        h.wfile.write(data)  # headers and body in one write: one segment per answer
        h.wfile.flush()

    def _json(self, h: _Handler, method: str, status: int, obj: Any) -> None:
        self._send(h, method, status, json.dumps(obj, separators=(",", ":")).encode())

    def _drop(self, h: _Handler, method: str, hold: float = 0.0) -> None:
        self._record(h, method, None)
        if hold:
            self._stopping.wait(hold)
        h.close_connection = True
        with contextlib.suppress(OSError):
            h.connection.shutdown(socket.SHUT_RDWR)

    def _dispatch(self, h: _Handler, method: str) -> None:
        try:
            self._dispatch_inner(h, method)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True

    def _dispatch_inner(self, h: _Handler, method: str) -> None:
        length = h.headers.get("Content-Length")
        try:
            body = h.rfile.read(int(length)) if length else b""
        except ValueError:
            h.close_connection = True
            return self._json(h, method, 400, {"error": "Bad request. Invalid Content-Length"})
        parts = urlsplit(h.path)
        path = parts.path.rstrip("/") or "/"
        query = parse_qs(parts.query, keep_blank_values=True)
        if path.startswith("/metadata") and self._rate_limited():
            return self._json(h, method, 429, {"error": "Too many requests"})
        if "X-Forwarded-For" in h.headers:
            return self._json(
                h,
                method,
                400,
                {"error": "Bad request. Requests with an X-Forwarded-For header are not allowed"},
            )
        if path == SE_PATH:
            if method not in ("GET", "POST"):
                return self._json(h, method, 405, {"error": "Method not allowed"})
        elif path in (INSTANCE_PATH, TOKEN_PATH) or path.startswith(INSTANCE_PATH + "/"):
            if method != "GET":
                return self._json(h, method, 405, {"error": "Method not allowed"})
        else:
            return self._json(h, method, 404, {"error": "Not found"})
        if path == TOKEN_PATH:
            return self._token(h, method, query)
        if h.headers.get("Metadata") != "true":
            return self._json(
                h, method, 400, {"error": "Bad request. Required metadata header not specified"}
            )
        version = query.get("api-version", [""])[0]
        allowed = SCHEDULED_EVENTS_VERSIONS if path == SE_PATH else INSTANCE_VERSIONS
        if not version or version not in allowed:
            newest = sorted(allowed, reverse=True)[:3]
            return self._json(
                h,
                method,
                400,
                {
                    "error": "Bad request. api-version is invalid or was not specified in the "
                    "request. For more information refer to aka.ms/azureimds",
                    "newest-versions": newest,
                },
            )
        if path == SE_PATH and method == "POST":
            return self._approval(h, method, body)
        if path == SE_PATH:
            return self._scheduled_events(h, method, version)
        return self._instance(h, method, path, query)

    def _scheduled_events(self, h: _Handler, method: str, version: str) -> None:
        with self._cond:
            first = not self._first_call_done
            self._first_call_done = True
        if first and self.first_call_delay > 0:
            self._stopping.wait(self.first_call_delay)
        fault: Fault | None = None
        with self._cond:
            if self._faults:
                fault = self._faults[0]
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.popleft()
        if fault is not None:
            k = fault.kind
            if k in ("410", "429", "500", "503"):
                texts = {
                    "410": "Gone",
                    "429": "Too many requests",
                    "500": "Internal Server Error",
                    "503": "Service Unavailable",
                }
                return self._json(h, method, int(k), {"error": texts[k]})
            if k == "empty":
                return self._send(h, method, 200, None)
            if k == "garbage":
                text = fault.body if fault.body is not None else "<html><body>upstream error"
                return self._send(h, method, 200, text.encode(), "text/html")
            if k == "wrong_shape":
                text = (
                    fault.body
                    if fault.body is not None
                    else json.dumps(
                        {"DocumentIncarnation": "not-a-number", "Events": {"EventId": 42}}
                    )
                )
                return self._send(h, method, 200, text.encode())
            if k == "drop":
                return self._drop(h, method)
            if k == "hang":
                return self._drop(h, method, fault.delay or self.hang_seconds)
            if k == "slow":
                self._stopping.wait(fault.delay)
        with self._cond:
            self._advance()
            if self.trace is not None:
                obs = self._trace_current()
                doc = None
            else:
                obs = None
                doc = {
                    "DocumentIncarnation": self._incarnation,
                    "Events": [render_event(e, version) for e in self._events],
                }
        if obs is None:
            return self._json(h, method, 200, doc)
        if obs.error is not None:
            return self._drop(h, method, self.hang_seconds if obs.error == "timeout" else 0.0)
        if obs.has_body:
            return self._json(h, method, obs.status or 200, obs.body)
        return self._send(
            h, method, obs.status or 200, (obs.text or "").encode(), "text/plain; charset=utf-8"
        )

    def _approval(self, h: _Handler, method: str, body: bytes) -> None:
        with self._cond:
            fault = self._approval_faults.popleft() if self._approval_faults else None
        if fault is not None:
            return self._json(h, method, fault, {"error": HTTPStatus(fault).phrase})
        bad = {"error": "Bad request. The StartRequests payload is malformed"}
        try:
            payload = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._json(h, method, 400, bad)
        if not isinstance(payload, dict) or set(payload) - {"StartRequests", "DocumentIncarnation"}:
            return self._json(h, method, 400, bad)
        reqs = payload.get("StartRequests")
        if (
            not isinstance(reqs, list)
            or not reqs
            or not all(
                isinstance(r, dict) and set(r) == {"EventId"} and isinstance(r["EventId"], str)
                for r in reqs
            )
        ):
            return self._json(h, method, 400, bad)
        with self._cond:
            self._advance()
            ok = self._approve_locked([r["EventId"] for r in reqs])
        if not ok:
            return self._json(h, method, 400, {"error": "Bad request. Unknown EventId"})
        return self._send(h, method, 200, None)

    def _instance(self, h: _Handler, method: str, path: str, query: dict[str, list[str]]) -> None:
        if self.instance_status is not None:  # the instance document failing (tests)
            return self._json(h, method, self.instance_status, {"error": "unavailable"})
        node: Any = self.instance_document()
        for part in [p for p in path[len(INSTANCE_PATH) :].split("/") if p]:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return self._json(h, method, 404, {"error": "Not found"})
        fmt = query.get("format", ["json"])[0]
        if fmt == "text":
            if isinstance(node, dict):
                text = "\n".join(
                    f"{k}/" if isinstance(v, (dict, list)) else k for k, v in node.items()
                )
            elif isinstance(node, list):
                text = "\n".join(f"{i}/" for i in range(len(node)))
            else:
                text = str(node)
            return self._send(h, method, 200, text.encode(), "text/plain; charset=utf-8")
        if fmt != "json":
            return self._json(h, method, 400, {"error": "Bad request. Invalid format"})
        if not isinstance(node, (dict, list)):
            return self._json(
                h,
                method,
                400,
                {"error": "Bad request. Query parameter format=text is required for leaf nodes"},
            )
        return self._json(h, method, 200, node)

    def _token(self, h: _Handler, method: str, query: dict[str, list[str]]) -> None:
        def refuse(desc: str) -> None:
            return self._json(
                h, method, 400, {"error": "invalid_request", "error_description": desc}
            )

        if h.headers.get("Metadata") != "true":
            return refuse("Required metadata header not specified")
        version = query.get("api-version", [""])[0]
        if not version:
            return refuse("Required query variable 'api-version' is missing")
        if version not in IDENTITY_VERSIONS:
            return refuse("Invalid api-version")
        resource = query.get("resource", [""])[0]
        if not resource:
            return refuse("Required query variable 'resource' is missing")
        selectors = {
            k: query[k][0]
            for k in ("client_id", "object_id", "msi_res_id", "mi_res_id")
            if k in query
        }
        ids = self.scenario.identities
        if len(selectors) > 1:
            return refuse("Only one of client_id, object_id or msi_res_id may be given")
        if selectors:
            key, value = next(iter(selectors.items()))
            attr = {
                "client_id": "client_id",
                "object_id": "object_id",
                "msi_res_id": "resource_id",
                "mi_res_id": "resource_id",
            }[key]
            match = [i for i in ids if getattr(i, attr).lower() == value.lower()]
            if not match:
                return refuse("Identity not found")
            subject, client_id = match[0].client_id, match[0].client_id
        elif self.scenario.system_identity:
            subject, client_id = "system-assigned", self.scenario.vm.vm_id
        elif len(ids) == 1:
            subject, client_id = ids[0].client_id, ids[0].client_id
        elif ids:
            return refuse(
                "Multiple user assigned identities exist, please specify the clientId "
                "/ resourceId of the identity in the token request"
            )
        else:
            return refuse("Identity not found")
        now = int(time.time())
        token, expires_on = self.token_authority.issue(
            resource, subject=subject, lifetime=TOKEN_LIFETIME, now=now
        )
        return self._json(
            h,
            method,
            200,
            {
                "access_token": token,
                "client_id": client_id,
                "expires_in": str(expires_on - now),
                "expires_on": str(expires_on),
                "ext_expires_in": str(expires_on - now),
                "not_before": str(now),
                "resource": resource,
                "token_type": "Bearer",
            },
        )
