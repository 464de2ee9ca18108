"""A local stand-in for the Azure Monitor Logs Ingestion API (Log Analytics), for tests and the demo.

The unmodified ``azure.monitor.ingestion.LogsIngestionClient`` uploads to it over HTTPS (a
certificate from ``tls.generate()``; clients trust its CA), and it enforces the service's rules:

======  ==============================  ====================================================
status  ``error.code``                  when
======  ==============================  ====================================================
204     (no body)                       records accepted (the only success answer)
400     ``InvalidApiVersion``           ``api-version`` missing or not 2023-01-01 / 2021-11-01-preview
400     ``InvalidStream``               the stream is not declared in the DCR
400     ``InvalidContentEncoding``      ``Content-Encoding`` other than gzip (or none)
400     ``InvalidPayload``              not gzip, not UTF-8 JSON, not an array of objects, a column
                                        not in the stream declaration, a value of the wrong type
                                        (the message names the record index and the column)
401     ``InvalidToken``                Bearer token missing, forged, expired, wrong audience
                                        (with ``WWW-Authenticate: Bearer ... error="invalid_token"``)
403     ``OperationFailed``             the token's subject holds no Monitoring Metrics Publisher
                                        role on the DCR (the real message's first sentence)
404     ``NotFound``                    unknown path, or a DCR immutable id that is not configured
411     ``LengthRequired``              no ``Content-Length``
413     ``ContentLengthLimitExceeded``  body over 1 MiB compressed or uncompressed
415     ``UnsupportedMediaType``        ``Content-Type`` not ``application/json``
429     ``TooManyRequests``             per DCR over 12,000 requests/min or 2 GB/min; ``Retry-After``
======  ==============================  ====================================================

Only the 403 code and message are taken from real answers; the other codes follow the service's
``{"error": {"code", "message"}}`` shape with our own names, so callers should branch on the
status, not on the code. Deliberate choices where the real service is not documented:

- Size: the wire body at most ``max_body_bytes`` (1 MiB). The uncompressed JSON may exceed it by
  its array punctuation only: the records' own JSON must fit in 1 MiB, the brackets and up to two
  bytes of separator per record are not counted. That is exactly the slack the SDK's own chunking
  leaves (it sizes chunks by the records alone); we infer the real service takes such chunks
  because Microsoft's own SDK sends them. One byte more of record data is a 413.
- Columns: a column outside the stream declaration is a 400 (the real service would drop it in
  the ``source`` transformation); better loud in tests than silently lost.
- Field values over 64 KB are truncated (strings at a UTF-8 character boundary; a ``dynamic``
  value whose JSON is longer becomes its truncated JSON text), counted in the stats.
- Checks run in this order: path, body read, injected fault, api-version, token (401), DCR (404),
  role (403), stream (400), Content-Type (415), rate (429), size (413), content (400). A request
  is all or nothing: one bad record and none of the batch is stored.
- Rate: the requests that pass the checks before it count against 12,000/min; the bytes of
  accepted bodies (the larger of compressed and uncompressed) against 2 GB/min; sliding window.

Injected faults (``fail_next``, ``throttle_next``, ``delay_next``, ``drop_next``, ``clear_faults``)
apply to the next ingestion POSTs in order, one request each; ``count=None`` means every request
until ``clear_faults()``. A delay is applied after the request was processed, before answering,
so a client that times out has lost the confirmation of a batch that was stored (the duplicate
case of at-least-once delivery).

Accepted records are kept in memory per stream (and optionally appended to a JSON Lines file);
``GET /_standin/records[?stream=S]`` and ``GET /_standin/stats`` answer them as JSON without a
token, to loopback clients only.
"""

from __future__ import annotations

import collections
import ipaddress
import json
import logging
import math
import socket
import ssl
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, unquote, urlsplit

from se_forwarder import contract

from .tls import TlsFiles, generate
from .tokens import MONITOR_AUDIENCE, InvalidToken, TokenAuthority

log = logging.getLogger(__name__)

API_VERSIONS = ("2023-01-01", "2021-11-01-preview")
DEFAULT_DCR_ID = "dcr-00000000000000000000000000000001"
MAX_BODY_BYTES = 1024 * 1024
MAX_FIELD_BYTES = 64 * 1024
REQUESTS_PER_MINUTE = 12_000
BYTES_PER_MINUTE = 2 * 1024 ** 3
MONITORING_METRICS_PUBLISHER = "Monitoring Metrics Publisher"
_WINDOW = 60.0
_READ_CAP = 64 * 1024 * 1024  # a declared body larger than this is not even read
_INT_RANGE = {"int": (-(2 ** 31), 2 ** 31 - 1), "long": (-(2 ** 63), 2 ** 63 - 1)}
_ACCEPTED = {"string": frozenset({str}), "datetime": frozenset({str}), "int": frozenset({int}),
             "long": frozenset({int}), "real": frozenset({int, float}), "bool": frozenset({bool}),
             "dynamic": frozenset({str, int, float, bool, list, dict})}
_STATUS_CODES = {400: "BadRequest", 401: "InvalidToken", 403: "OperationFailed", 404: "NotFound",
                 408: "RequestTimeout", 413: "ContentLengthLimitExceeded", 429: "TooManyRequests",
                 500: "InternalServerError", 502: "BadGateway", 503: "ServiceUnavailable",
                 504: "GatewayTimeout"}


@dataclass
class StreamStats:
    requests: int = 0  # accepted requests (204)
    records: int = 0
    compressed_bytes: int = 0  # wire bytes of the accepted bodies
    uncompressed_bytes: int = 0
    max_compressed: int = 0  # largest accepted body on the wire
    max_uncompressed: int = 0
    truncated_fields: int = 0


@dataclass(frozen=True)
class RequestLog:
    """One ingestion POST as the stand-in answered it."""

    at: float
    dcr_id: str
    stream: str
    status: int  # 0: connection dropped without an answer
    records: int
    compressed: int
    uncompressed: int
    encoding: str  # Content-Encoding as sent ("" when none)
    subject: str | None
    fault: str | None  # the injected fault that decided the answer, if any
    retry_after: str | None = None


@dataclass
class _Fault:
    kind: str  # "status", "delay", "drop"
    status: int = 0
    retry_after: str | None = None
    code: str | None = None
    message: str | None = None
    delay: float = 0.0
    remaining: int | None = 1  # None: until cleared


class _Answer(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}


class LogsIngestionStandIn:
    """The Logs Ingestion service on ``https://localhost:PORT`` (see the module docstring)."""

    def __init__(self, tls_dir: str | Path, token_authority: TokenAuthority,
                 dcr_ids: Iterable[str] = (DEFAULT_DCR_ID,), host: str = "127.0.0.1", port: int = 0,
                 allowed_subjects: Iterable[str] | None = None, *,
                 records_file: str | Path | None = None,
                 max_body_bytes: int = MAX_BODY_BYTES, max_field_bytes: int = MAX_FIELD_BYTES,
                 requests_per_minute: int = REQUESTS_PER_MINUTE,
                 bytes_per_minute: int = BYTES_PER_MINUTE) -> None:
        self.tls: TlsFiles = generate(tls_dir)
        self.authority = token_authority
        self.dcr_ids = tuple(dcr_ids)
        if not self.dcr_ids:
            raise ValueError("at least one DCR immutable id is needed")
        self.host, self._port = host, port
        self.allowed_subjects = None if allowed_subjects is None else frozenset(allowed_subjects)
        self.records_file = Path(records_file) if records_file else None
        self.max_body_bytes = max_body_bytes
        self.max_field_bytes = max_field_bytes
        self.requests_per_minute = requests_per_minute
        self.bytes_per_minute = bytes_per_minute
        # The stream declarations: the same columns the Bicep DCR declares (contract.json).
        self.streams: dict[str, dict[str, str]] = {
            spec.stream: {c.name: c.type for c in spec.columns} for spec in contract.tables().values()}

        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._records: dict[str, list[dict]] = {s: [] for s in self.streams}
        self._stats: dict[str, StreamStats] = {s: StreamStats() for s in self.streams}
        self._history: collections.deque[RequestLog] = collections.deque(maxlen=100_000)
        self._faults: collections.deque[_Fault] = collections.deque()
        self._windows: dict[str, collections.deque[list]] = {
            d: collections.deque() for d in self.dcr_ids}
        self._window_bytes: dict[str, int] = {d: 0 for d in self.dcr_ids}
        self._server: _TlsServer | None = None
        self._thread: threading.Thread | None = None
        self._persist = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> LogsIngestionStandIn:
        if self._server is not None:
            return self
        if self.records_file is not None:
            self.records_file.parent.mkdir(parents=True, exist_ok=True)
            self._persist = self.records_file.open("a", encoding="utf-8")
        self._server = _TlsServer((self.host, self._port), _Handler, self.tls.server_context(), self)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.1},
                                        name="logs-ingestion-standin", daemon=True)
        self._thread.start()
        log.info("Logs Ingestion stand-in listening on %s (CA %s)", self.endpoint, self.ca_cert)
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.close_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            if self._persist is not None:
                self._persist.close()
                self._persist = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the stand-in is not started")
        return self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        """The logs-ingestion endpoint to give ``LogsIngestionClient`` (the certificate names localhost)."""
        return f"https://localhost:{self.port}"

    @property
    def ca_cert(self) -> Path:
        """The CA to trust: ``connection_verify=str(ca_cert)`` or ``REQUESTS_CA_BUNDLE``."""
        return self.tls.ca_cert

    @property
    def dcr_id(self) -> str:
        return self.dcr_ids[0]

    # ------------------------------------------------------------------ faults

    def fail_next(self, count: int | None = 1, status: int = 500, *, retry_after: float | str | None = None,
                  code: str | None = None, message: str | None = None) -> None:
        """Answer the next ``count`` ingestion requests with ``status`` (``None``: until cleared)."""
        ra = None if retry_after is None else _fmt_seconds(retry_after)
        self._add_fault(_Fault("status", status=status, retry_after=ra, code=code, message=message,
                               remaining=count))

    def throttle_next(self, count: int | None = 1, retry_after: float | str | None = 1) -> None:
        """429 for the next ``count`` requests; ``retry_after=None`` leaves the header out."""
        self.fail_next(count, 429, retry_after=retry_after,
                       message="Request rate or data volume limit exceeded for this data collection rule.")

    def delay_next(self, count: int | None = 1, seconds: float = 1.0) -> None:
        """Process the next ``count`` requests normally but answer only after ``seconds``."""
        self._add_fault(_Fault("delay", delay=seconds, remaining=count))

    def drop_next(self, count: int | None = 1) -> None:
        """Read the next ``count`` requests, then close the connection without answering (nothing stored)."""
        self._add_fault(_Fault("drop", remaining=count))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def set_allowed_subjects(self, subjects: Iterable[str] | None) -> None:
        """Who holds Monitoring Metrics Publisher on the DCRs; ``None``: any valid token."""
        with self._lock:
            self.allowed_subjects = None if subjects is None else frozenset(subjects)

    def _add_fault(self, fault: _Fault) -> None:
        if fault.remaining is not None and fault.remaining < 1:
            raise ValueError("count must be at least 1 (or None for every request until cleared)")
        with self._lock:
            self._faults.append(fault)

    def _take_fault(self) -> _Fault | None:
        with self._lock:
            if not self._faults:
                return None
            fault = self._faults[0]
            if fault.remaining is not None:
                fault.remaining -= 1
                if fault.remaining == 0:
                    self._faults.popleft()
            return fault

    # ------------------------------------------------------------------ records

    def records(self, stream: str) -> list[dict]:
        """A copy of the records accepted on ``stream``, in arrival order."""
        self._check_stream(stream)
        with self._lock:
            return list(self._records[stream])

    def wait_for(self, stream: str, count: int, timeout: float = 10.0) -> list[dict]:
        """Wait until at least ``count`` records were accepted on ``stream``; TimeoutError otherwise."""
        self._check_stream(stream)
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self._records[stream]) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self._records[stream])} of {count} records on {stream} "
                                       f"after {timeout} s")
                self._changed.wait(left)
            return list(self._records[stream])

    def stats(self, stream: str) -> StreamStats:
        self._check_stream(stream)
        with self._lock:
            return StreamStats(**asdict(self._stats[stream]))

    def history(self) -> list[RequestLog]:
        """Every ingestion POST answered so far (the last 100,000), in order."""
        with self._lock:
            return list(self._history)

    def reset(self) -> None:
        """Forget accepted records, stats, history, rate windows and faults."""
        with self._lock:
            for s in self.streams:
                self._records[s] = []
                self._stats[s] = StreamStats()
            self._history.clear()
            self._faults.clear()
            for d in self.dcr_ids:
                self._windows[d].clear()
                self._window_bytes[d] = 0

    def _check_stream(self, stream: str) -> None:
        if stream not in self.streams:
            raise KeyError(f"stream {stream!r} is not declared (declared: {', '.join(self.streams)})")

    # ------------------------------------------------------------------ the protocol

    def _handle_ingest(self, h: _Handler, dcr_id: str, stream: str, query: dict[str, list[str]],
                       body: bytes) -> None:
        encoding = (h.headers.get("Content-Encoding") or "").strip().lower()
        ctx = {"dcr_id": dcr_id, "stream": stream, "compressed": len(body), "encoding": encoding,
               "subject": None, "rows": 0, "uncompressed": 0}
        fault = self._take_fault()
        if fault is not None and fault.kind == "drop":
            self._log_request(ctx, 0, "drop")
            h.drop()
            return
        try:
            if fault is not None and fault.kind == "status":
                headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
                if fault.status == 401:
                    headers["WWW-Authenticate"] = _www_authenticate("injected fault")
                raise _Answer(fault.status, fault.code or _STATUS_CODES.get(fault.status, "Error"),
                              fault.message or f"Injected fault: {fault.status}.", headers)
            self._ingest(h, dcr_id, stream, query, body, encoding, ctx)
            status, payload, headers = 204, None, {}
        except _Answer as a:
            status, headers = a.status, a.headers
            payload = {"error": {"code": a.code, "message": a.message}}
        fault_name = None
        if fault is not None:
            fault_name = f"status {fault.status}" if fault.kind == "status" else f"delay {fault.delay}s"
        self._log_request(ctx, status, fault_name, headers.get("Retry-After"))
        if fault is not None and fault.kind == "delay":
            time.sleep(fault.delay)
        h.answer(status, payload, headers)

    def _ingest(self, h: _Handler, dcr_id: str, stream: str, query: dict[str, list[str]],
                body: bytes, encoding: str, ctx: dict) -> None:
        version = (query.get("api-version") or [""])[0]
        if version not in API_VERSIONS:
            raise _Answer(400, "InvalidApiVersion",
                          f"The api-version '{version}' is not supported. Supported versions: "
                          f"{', '.join(API_VERSIONS)}.")
        claims = self._authenticate(h.headers.get("Authorization"))
        subject = claims.get("sub")
        ctx["subject"] = subject
        if dcr_id not in self.dcr_ids:
            raise _Answer(404, "NotFound", f"Data collection rule with immutable Id '{dcr_id}' not found.")
        with self._lock:
            allowed = self.allowed_subjects
        if allowed is not None and subject not in allowed:
            raise _Answer(403, "OperationFailed",
                          "The authentication token provided does not have access to ingest data for "
                          f"the data collection rule with immutable Id '{dcr_id}'.")
        declaration = self.streams.get(stream)
        if declaration is None:
            raise _Answer(400, "InvalidStream",
                          f"Stream '{stream}' is not declared in data collection rule '{dcr_id}'. "
                          f"Declared streams: {', '.join(self.streams)}.")
        ctype = (h.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise _Answer(415, "UnsupportedMediaType",
                          f"Content-Type must be application/json, not '{ctype or '(none)'}'.")
        ctx["window_entry"] = self._check_rate(dcr_id)

        limit = self.max_body_bytes
        if len(body) > limit:
            raise _Answer(413, "ContentLengthLimitExceeded",
                          f"The request body is {len(body)} bytes; the maximum is {limit} bytes per call.")
        if encoding == "gzip":
            data = _gunzip(body, 2 * limit + 1)
        elif encoding in ("", "identity"):
            data = body
        else:
            raise _Answer(400, "InvalidContentEncoding",
                          f"Content-Encoding '{encoding}' is not supported; use gzip or none.")
        ctx["uncompressed"] = len(data)
        if len(data) > 2 * limit:
            raise _Answer(413, "ContentLengthLimitExceeded",
                          f"The uncompressed request body is over {2 * limit} bytes; the maximum is "
                          f"{limit} bytes of records per call.")
        try:
            logs = json.loads(data)
        except UnicodeDecodeError as exc:
            raise _Answer(400, "InvalidPayload", f"The request body is not UTF-8: {exc}.") from None
        except ValueError as exc:
            raise _Answer(400, "InvalidPayload", f"The request body is malformed JSON: {exc}.") from None
        if not isinstance(logs, list):
            raise _Answer(400, "InvalidPayload",
                          f"The request body must be a JSON array of objects, not {_json_type(logs)}.")
        counted = len(data) - 2 * len(logs)  # the records alone, as the SDK's chunking counts them
        if counted > limit:
            raise _Answer(413, "ContentLengthLimitExceeded",
                          f"The uncompressed request body holds {counted} bytes of records; the maximum "
                          f"is {limit} bytes per call.")
        accepted, truncated = self._validate(logs, declaration, stream, dcr_id)
        ctx["rows"] = len(accepted)
        self._store(stream, accepted, len(body), len(data), truncated)

    def _authenticate(self, header: str | None) -> dict:
        if not header:
            raise _Answer(401, "InvalidToken", "The request has no Authorization header with a Bearer token.",
                          {"WWW-Authenticate": _www_authenticate("no token")})
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _Answer(401, "InvalidToken", "The Authorization header is not a Bearer token.",
                          {"WWW-Authenticate": _www_authenticate("not a Bearer token")})
        try:
            return self.authority.verify(token.strip(), MONITOR_AUDIENCE)
        except InvalidToken as exc:
            raise _Answer(401, "InvalidToken", f"The access token is invalid: {exc}.",
                          {"WWW-Authenticate": _www_authenticate(str(exc))}) from None

    def _check_rate(self, dcr_id: str) -> list:
        now = time.monotonic()
        with self._lock:
            window = self._windows[dcr_id]
            while window and window[0][0] <= now - _WINDOW:
                self._window_bytes[dcr_id] -= window.popleft()[1]
            if len(window) >= self.requests_per_minute or self._window_bytes[dcr_id] >= self.bytes_per_minute:
                wait = max(1, math.ceil(window[0][0] + _WINDOW - now))
                raise _Answer(429, "TooManyRequests",
                              f"Data collection rule '{dcr_id}' is over its limit of "
                              f"{self.requests_per_minute} requests or {self.bytes_per_minute} bytes "
                              f"per minute. Retry after {wait} seconds.",
                              {"Retry-After": str(wait)})
            entry = [now, 0]  # the request counts now; its bytes once accepted
            window.append(entry)
            return entry

    def _validate(self, logs: list, declaration: dict[str, str], stream: str,
                  dcr_id: str) -> tuple[list[dict], int]:
        """Check every record against the stream declaration (all or nothing); truncate long fields.

        The records are the freshly parsed request body, so long values are cut in place.
        """
        max_field = self.max_field_bytes
        max_chars = max_field // 4  # a value of at most this many characters fits in any encoding
        truncated = 0
        for i, rec in enumerate(logs):
            if type(rec) is not dict:
                raise _Answer(400, "InvalidPayload",
                              f"Record {i} is {_json_type(rec)}; each element of the array must be an object.")
            for name, value in rec.items():
                kind = declaration.get(name)
                if kind is None:
                    raise _Answer(400, "InvalidPayload",
                                  f"Record {i}: column '{name}' is not declared in stream '{stream}' of "
                                  f"data collection rule '{dcr_id}'.")
                if value is None:
                    continue
                t = type(value)
                if t in _ACCEPTED[kind]:
                    if t is int and kind in _INT_RANGE:
                        lo, hi = _INT_RANGE[kind]
                        ok = lo <= value <= hi
                    elif kind == "datetime":
                        ok = _is_datetime(value)
                    else:
                        ok = True
                else:
                    ok = False
                if not ok:
                    problem = _type_problem(kind, value) or "not accepted"
                    raise _Answer(400, "InvalidPayload",
                                  f"Record {i}: column '{name}' of type '{kind}' cannot hold "
                                  f"{_preview(value)}: {problem}.")
                if t is str:
                    if len(value) > max_chars:
                        cut = _truncate(value, max_field)
                        if cut is not value:
                            rec[name], truncated = cut, truncated + 1
                elif t is dict or t is list:  # dynamic
                    text = json.dumps(value, ensure_ascii=False)
                    if len(text) > max_chars and len(text.encode("utf-8")) > max_field:
                        rec[name], truncated = _truncate(text, max_field), truncated + 1
        return logs, truncated

    def _store(self, stream: str, accepted: list[dict], compressed: int, uncompressed: int,
               truncated: int) -> None:
        with self._changed:
            self._records[stream].extend(accepted)
            s = self._stats[stream]
            s.requests += 1
            s.records += len(accepted)
            s.compressed_bytes += compressed
            s.uncompressed_bytes += uncompressed
            s.max_compressed = max(s.max_compressed, compressed)
            s.max_uncompressed = max(s.max_uncompressed, uncompressed)
            s.truncated_fields += truncated
            if self._persist is not None:
                for rec in accepted:
                    self._persist.write(json.dumps({"stream": stream, "record": rec},
                                                   separators=(",", ":")) + "\n")
                self._persist.flush()
            self._changed.notify_all()

    def _log_request(self, ctx: dict, status: int, fault: str | None, retry_after: str | None = None) -> None:
        entry = RequestLog(time.time(), ctx["dcr_id"], ctx["stream"], status, ctx["rows"],
                           ctx["compressed"], ctx["uncompressed"], ctx["encoding"], ctx["subject"],
                           fault, retry_after)
        with self._lock:
            self._history.append(entry)
            entry = ctx.get("window_entry")
            if status == 204 and entry is not None:  # accepted bytes count against the volume limit
                entry[1] = max(ctx["compressed"], ctx["uncompressed"])
                self._window_bytes[ctx["dcr_id"]] += entry[1]

    def _handle_get(self, h: _Handler, path: str, query: dict[str, list[str]]) -> None:
        try:
            loopback = ipaddress.ip_address(h.client_address[0]).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            h.answer(403, {"error": {"code": "Forbidden", "message": "Stand-in queries are for loopback clients."}})
            return
        if path == "/_standin/records":
            wanted = query.get("stream")
            if wanted and wanted[0] not in self.streams:
                h.answer(404, {"error": {"code": "NotFound", "message": f"Stream '{wanted[0]}' is not declared."}})
                return
            names = [wanted[0]] if wanted else list(self.streams)
            with self._lock:
                out = {n: list(self._records[n]) for n in names}
            payload: dict[str, Any] = {"streams": out}
            if wanted:
                payload = {"stream": names[0], "count": len(out[names[0]]), "records": out[names[0]]}
            h.answer(200, payload)
        elif path == "/_standin/stats":
            with self._lock:
                payload = {"streams": {n: asdict(s) for n, s in self._stats.items()},
                           "requests": len(self._history),
                           "answers": dict(collections.Counter(str(r.status) for r in self._history))}
            h.answer(200, payload)
        else:
            h.answer(404, {"error": {"code": "NotFound", "message": f"No resource at '{path}'."}})


# ---------------------------------------------------------------------- HTTP plumbing


class _TlsServer(ThreadingHTTPServer):
    """ThreadingHTTPServer whose connections speak TLS only; the handshake runs in the connection's
    own thread, so a slow or plain-text client never holds up the accept loop."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type, context: ssl.SSLContext,
                 standin: LogsIngestionStandIn) -> None:
        self.ssl_context = context
        self.standin = standin
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

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
            self.RequestHandlerClass(conn, client_address, self)
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "se-forwarder-logs-ingestion-standin"
    sys_version = ""
    timeout = 60  # idle keep-alive connections are closed after this

    server: _TlsServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        parts = url.path.split("/")
        # "", "dataCollectionRules", {id}, "streams", {stream}
        if len(parts) != 5 or parts[1] != "dataCollectionRules" or parts[3] != "streams" \
                or not parts[2] or not parts[4]:
            self._discard_body()
            self.answer(404, {"error": {"code": "NotFound", "message": f"No resource at '{url.path}'."}})
            return
        body = self._read_body()
        if body is None:
            return
        self.server.standin._handle_ingest(self, unquote(parts[2]), unquote(parts[4]),
                                           parse_qs(url.query), body)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        self.server.standin._handle_get(self, url.path, parse_qs(url.query))

    def _not_allowed(self) -> None:
        self._discard_body()
        self.answer(405, {"error": {"code": "MethodNotAllowed",
                                    "message": f"Method {self.command} is not allowed; use POST."}},
                    {"Allow": "POST"})

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _not_allowed

    def _read_body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            self.answer(411, {"error": {"code": "LengthRequired",
                                        "message": "Send the body with a Content-Length."}}, {"Connection": "close"})
            return None
        try:
            length = int(self.headers.get("Content-Length", ""))
            if length < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            self.answer(411, {"error": {"code": "LengthRequired",
                                        "message": "A valid Content-Length is required."}}, {"Connection": "close"})
            return None
        if length > _READ_CAP:
            self.close_connection = True
            self.answer(413, {"error": {"code": "ContentLengthLimitExceeded",
                                        "message": f"The request body is {length} bytes; the maximum is "
                                                   f"{self.server.standin.max_body_bytes} bytes per call."}},
                        {"Connection": "close"})
            return None
        return self.rfile.read(length)

    def _discard_body(self) -> None:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = 0
        if 0 < length <= _READ_CAP:
            self.rfile.read(length)
        elif length or self.headers.get("Transfer-Encoding"):
            self.close_connection = True

    def answer(self, status: int, payload: dict | None, headers: dict[str, str] | None = None) -> None:
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
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass


# ---------------------------------------------------------------------- helpers


def _close(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        conn.close()
    except OSError:
        pass


def _www_authenticate(reason: str) -> str:
    reason = reason.replace('"', "'")
    return ('Bearer authorization_uri="https://login.microsoftonline.com/common/oauth2/authorize", '
            f'error="invalid_token", error_description="{reason}"')


def _fmt_seconds(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _gunzip(body: bytes, cap: int) -> bytes:
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = d.decompress(body, cap)
    except zlib.error as exc:
        raise _Answer(400, "InvalidPayload", f"Content-Encoding is gzip but the body is not: {exc}.") from None
    if len(data) >= cap:
        return data  # over the limit; the caller answers 413 without inflating further
    if not d.eof:
        raise _Answer(400, "InvalidPayload", "Content-Encoding is gzip but the gzip stream is truncated.")
    return data


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _preview(value: Any) -> str:
    text = json.dumps(value)
    return f"{_json_type(value)} {text if len(text) <= 60 else text[:57] + '...'}"


def _type_problem(kind: str, value: Any) -> str | None:
    """Why ``value`` (not null) does not fit a column of contract type ``kind``; None if it does."""
    if kind == "string":
        return None if isinstance(value, str) else "expected a string"
    if kind == "dynamic":
        return None
    if kind == "real":
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "expected a number"
    if kind in _INT_RANGE:
        if isinstance(value, bool) or not isinstance(value, int):
            return "expected an integer"
        lo, hi = _INT_RANGE[kind]
        return None if lo <= value <= hi else f"out of the range of {kind}"
    if kind == "bool":
        return None if isinstance(value, bool) else "expected true or false"
    if kind == "datetime":
        if not isinstance(value, str):
            return "expected an ISO 8601 date and time string"
        try:
            datetime.fromisoformat(value)
        except ValueError:
            return "not an ISO 8601 date and time"
        return None
    return f"unknown column type {kind!r}"


def _is_datetime(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _truncate(text: str, max_bytes: int) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    return raw[:max_bytes].decode("utf-8", errors="ignore")
