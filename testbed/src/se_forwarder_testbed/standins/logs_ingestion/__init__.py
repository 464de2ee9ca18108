"""A local stand-in for the Azure Monitor Logs Ingestion API (Log Analytics), for tests and the
demo.

The unmodified ``azure.monitor.ingestion.LogsIngestionClient`` uploads to it over HTTPS (a
certificate from ``tls.generate()``; clients trust its CA), and it enforces the service's rules:

======  ==============================  ====================================================
status  ``error.code``                  when
======  ==============================  ====================================================
204     (no body)                       records accepted (the only success answer)
400     ``InvalidApiVersion``           ``api-version`` missing or not 2023-01-01 /
                                        2021-11-01-preview
400     ``InvalidStream``               the stream is not declared in the DCR
400     ``InvalidContentEncoding``      ``Content-Encoding`` other than gzip (or none)
400     ``InvalidPayload``              not gzip, not UTF-8 JSON, not an array of objects, a column
                                        not in the stream declaration, a value of the wrong type,
                                        a row without ``TimeGenerated`` (the message names the
                                        record index and the column)
401     ``InvalidToken``                Bearer token missing, forged, expired, wrong audience
                                        (with ``WWW-Authenticate: Bearer ...``,
                                        ``error="invalid_token"``)
403     ``OperationFailed``             the token's subject holds no Monitoring Metrics Publisher
                                        role on the DCR (the real message's first sentence)
404     ``NotFound``                    unknown path, or a DCR immutable id that is not configured
411     ``LengthRequired``              no ``Content-Length`` (ours, see below)
413     ``ContentLengthLimitExceeded``  body over 1 MiB compressed or uncompressed
415     ``UnsupportedMediaType``        ``Content-Type`` not ``application/json`` (ours, see below)
429     ``TooManyRequests``             per DCR over 12,000 requests/min or 2 GB/min;
                                        ``Retry-After``
======  ==============================  ====================================================

Only the 403 code and message are taken from real answers; the other codes follow the service's
``{"error": {"code", "message"}}`` shape with our own names, so callers should branch on the
status, not on the code. The 411 and 415 answers are ours, not the service's: Microsoft
documents that the call needs ``Content-Type: application/json`` and a JSON body, not what it
answers otherwise; the SDK always sends both, so they only ever meet a hand-made client.

A row without ``TimeGenerated`` is refused (400, the whole request, like any bad row). Microsoft
documents that every Log Analytics table has a ``TimeGenerated`` column and that the output of a
DCR's transformation must hold a valid ``datetime`` ``TimeGenerated``: "Structure of
transformation in Azure Monitor", section "Required columns"
(https://learn.microsoft.com/azure/azure-monitor/essentials/data-collection-transformations-structure#required-columns)
and "Add or delete tables and columns in Azure Monitor Logs"
(https://learn.microsoft.com/azure/azure-monitor/logs/create-custom-table). Our transformation
(dashboards/queries/transforms) passes ``TimeGenerated`` through, so a row without it has none.
The service records such per-row failures in the DCR's error log (``DCRLogErrors``) rather than
in the HTTP answer; the stand-in says it in the answer, so a test sees it.

Deliberate choices where the real service is not documented:

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

Modules: ``standin`` (the public API), ``server`` (HTTPS, bodies, answers), ``ingest`` (a POST
in the order above), ``payload`` (size, gzip, JSON), ``schema`` (records against contract.json),
``rate`` (per-DCR limits), ``faults``, ``records`` (what was accepted, counters, history),
``inspection`` (the ``/_standin`` queries), ``answers`` (the error shape).
"""

from __future__ import annotations

from .ingest import API_VERSIONS
from .records import RequestLog, StreamStats
from .standin import (
    BYTES_PER_MINUTE,
    DEFAULT_DCR_ID,
    MAX_BODY_BYTES,
    MAX_FIELD_BYTES,
    MONITORING_METRICS_PUBLISHER,
    REQUESTS_PER_MINUTE,
    LogsIngestionStandIn,
)

__all__ = [
    "API_VERSIONS",
    "BYTES_PER_MINUTE",
    "DEFAULT_DCR_ID",
    "MAX_BODY_BYTES",
    "MAX_FIELD_BYTES",
    "MONITORING_METRICS_PUBLISHER",
    "REQUESTS_PER_MINUTE",
    "LogsIngestionStandIn",
    "RequestLog",
    "StreamStats",
]
