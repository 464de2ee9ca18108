"""An ingestion POST from start to answer, checks in the service's order: injected fault,
api-version, token (401), DCR (404), role (403), stream (400), Content-Type (415), rate (429),
size (413), content (400). All or nothing: one bad record and none of the batch is stored."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..tokens import MONITOR_AUDIENCE, InvalidToken, TokenAuthority
from . import payload
from .answers import Answer, www_authenticate
from .faults import Faults
from .rate import RateWindows
from .records import Records, RequestLog
from .schema import validate
from .server import Handler, Query

if TYPE_CHECKING:
    from .standin import LogsIngestionStandIn

API_VERSIONS = ("2023-01-01", "2021-11-01-preview")


@dataclass
class _Request:
    """What the history records of one POST, filled in as the checks pass."""

    dcr_id: str
    stream: str
    compressed: int
    encoding: str
    subject: str | None = None
    rows: int = 0
    uncompressed: int = 0
    window_entry: list[Any] | None = None  # its entry in the DCR's rate window, once admitted


def authenticate(authority: TokenAuthority, header: str | None) -> dict[str, Any]:
    """The claims of the Bearer token in ``header``; a 401 when there is none valid."""
    if not header:
        raise Answer(
            401,
            "InvalidToken",
            "The request has no Authorization header with a Bearer token.",
            {"WWW-Authenticate": www_authenticate("no token")},
        )
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Answer(
            401,
            "InvalidToken",
            "The Authorization header is not a Bearer token.",
            {"WWW-Authenticate": www_authenticate("not a Bearer token")},
        )
    try:
        return authority.verify(token.strip(), MONITOR_AUDIENCE)
    except InvalidToken as exc:
        raise Answer(
            401,
            "InvalidToken",
            f"The access token is invalid: {exc}.",
            {"WWW-Authenticate": www_authenticate(str(exc))},
        ) from None


class Ingestion:
    """Answers ingestion POSTs for ``service`` (its configuration is read on every request)."""

    def __init__(
        self, service: LogsIngestionStandIn, faults: Faults, records: Records, rate: RateWindows
    ) -> None:
        self.service = service
        self.faults = faults
        self.records = records
        self.rate = rate

    def post(self, h: Handler, dcr_id: str, stream: str, query: Query, body: bytes) -> None:
        encoding = (h.headers.get("Content-Encoding") or "").strip().lower()
        req = _Request(dcr_id, stream, len(body), encoding)
        fault = self.faults.take()
        if fault is not None and fault.kind == "drop":
            self._log(req, 0, fault.name)
            h.drop()
            return
        try:
            if fault is not None and fault.kind == "status":
                raise fault.answer()
            self._ingest(h, req, query, body)
            status, body_out, headers = 204, None, {}
        except Answer as a:
            status, body_out, headers = a.status, a.payload, a.headers
        self._log(req, status, None if fault is None else fault.name, headers.get("Retry-After"))
        if fault is not None and fault.kind == "delay":
            time.sleep(fault.delay)  # processed (and stored) first: a late answer
        h.answer(status, body_out, headers)

    def _ingest(self, h: Handler, req: _Request, query: Query, body: bytes) -> None:
        declaration = self._admit(h, req, query)
        limit = self.service.max_body_bytes
        data = payload.inflate(body, req.encoding, limit)
        req.uncompressed = len(data)
        logs = payload.parse(data, limit)
        accepted, truncated = validate(
            logs, declaration, req.stream, req.dcr_id, self.service.max_field_bytes
        )
        req.rows = len(accepted)
        self.records.store(req.stream, accepted, len(body), len(data), truncated)

    def _admit(self, h: Handler, req: _Request, query: Query) -> dict[str, str]:
        """The checks before the body is looked at; returns the stream's declaration."""
        s, dcr_id = self.service, req.dcr_id
        version = (query.get("api-version") or [""])[0]
        if version not in API_VERSIONS:
            raise Answer(
                400,
                "InvalidApiVersion",
                f"The api-version '{version}' is not supported. Supported versions: "
                f"{', '.join(API_VERSIONS)}.",
            )
        req.subject = authenticate(s.authority, h.headers.get("Authorization")).get("sub")
        if dcr_id not in s.dcr_ids:
            raise Answer(
                404, "NotFound", f"Data collection rule with immutable Id '{dcr_id}' not found."
            )
        allowed = s.allowed_subjects
        if allowed is not None and req.subject not in allowed:
            raise Answer(
                403,
                "OperationFailed",
                "The authentication token provided does not have access to ingest data for "
                f"the data collection rule with immutable Id '{dcr_id}'.",
            )
        declaration = s.streams.get(req.stream)
        if declaration is None:
            raise Answer(
                400,
                "InvalidStream",
                f"Stream '{req.stream}' is not declared in data collection rule '{dcr_id}'. "
                f"Declared streams: {', '.join(s.streams)}.",
            )
        ctype = (h.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise Answer(
                415,
                "UnsupportedMediaType",
                f"Content-Type must be application/json, not '{ctype or '(none)'}'.",
            )
        req.window_entry = self.rate.admit(dcr_id, s.requests_per_minute, s.bytes_per_minute)
        return declaration

    def _log(
        self, req: _Request, status: int, fault: str | None, retry_after: str | None = None
    ) -> None:
        self.records.log(
            RequestLog(
                time.time(),
                req.dcr_id,
                req.stream,
                status,
                req.rows,
                req.compressed,
                req.uncompressed,
                req.encoding,
                req.subject,
                fault,
                retry_after,
            )
        )
        if (
            status == 204 and req.window_entry is not None
        ):  # accepted bytes count against the volume limit
            self.rate.count_bytes(
                req.dcr_id, req.window_entry, max(req.compressed, req.uncompressed)
            )
