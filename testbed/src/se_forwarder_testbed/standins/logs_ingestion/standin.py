"""The stand-in as tests, the demo and ``se-forwarder standin`` use it: configuration, start and
stop, the address and CA a client needs, fault injection and the records it accepted."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from se_forwarder import contract
from se_forwarder.clock import Clock

from ..served import Served
from ..tls import TlsFiles, generate
from ..tokens import TokenAuthority
from .faults import Faults
from .ingest import Ingestion
from .inspection import Inspection
from .rate import RateWindows
from .records import Records, RequestLog, StreamStats
from .server import TlsServer

log = logging.getLogger(__name__)

DEFAULT_DCR_ID = "dcr-00000000000000000000000000000001"
MAX_BODY_BYTES = 1024 * 1024
MAX_FIELD_BYTES = 64 * 1024
REQUESTS_PER_MINUTE = 12_000
BYTES_PER_MINUTE = 2 * 1024**3
MONITORING_METRICS_PUBLISHER = "Monitoring Metrics Publisher"


class LogsIngestionStandIn(Served):
    """The Logs Ingestion service on ``https://localhost:PORT`` (see the package's docstring)."""

    def __init__(
        self,
        tls_dir: str | Path,
        token_authority: TokenAuthority,
        dcr_ids: Iterable[str] = (DEFAULT_DCR_ID,),
        host: str = "127.0.0.1",
        port: int = 0,
        allowed_subjects: Iterable[str] | None = None,
        *,
        records_file: str | Path | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_field_bytes: int = MAX_FIELD_BYTES,
        requests_per_minute: int = REQUESTS_PER_MINUTE,
        bytes_per_minute: int = BYTES_PER_MINUTE,
        ingestion_clock: Clock | None = None,
    ) -> None:
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
            spec.stream: {c.name: c.type for c in spec.columns}
            for spec in contract.tables().values()
        }

        self._faults = Faults()
        self._records = Records(list(self.streams), self.records_file, ingestion_clock)
        self._rate = RateWindows(self.dcr_ids)
        self._ingestion = Ingestion(self, self._faults, self._records, self._rate)
        self._inspection = Inspection(self._records)
        self._server: TlsServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> LogsIngestionStandIn:
        if self._server is not None:
            return self
        self._records.open()
        self._server = TlsServer(
            (self.host, self._port),
            self.tls.server_context(),
            post=self._ingestion.post,
            get=self._inspection.get,
            max_body_bytes=self.max_body_bytes,
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="logs-ingestion-standin",
            daemon=True,
        )
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
        self._records.close()

    @property
    def endpoint(self) -> str:
        """The logs-ingestion endpoint to give ``LogsIngestionClient`` (the certificate names
        localhost)."""
        return f"https://localhost:{self.port}"

    @property
    def ca_cert(self) -> Path:
        """The CA to trust: ``connection_verify=str(ca_cert)`` or ``REQUESTS_CA_BUNDLE``."""
        return self.tls.ca_cert

    @property
    def dcr_id(self) -> str:
        return self.dcr_ids[0]

    # ------------------------------------------------------------------ faults

    def fail_next(
        self,
        count: int | None = 1,
        status: int = 500,
        *,
        retry_after: float | str | None = None,
        code: str | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the next ``count`` ingestion requests with ``status`` (``None``: until
        cleared)."""
        self._faults.fail(count, status, retry_after, code, message)

    def throttle_next(self, count: int | None = 1, retry_after: float | str | None = 1) -> None:
        """429 for the next ``count`` requests; ``retry_after=None`` leaves the header out."""
        self.fail_next(
            count,
            429,
            retry_after=retry_after,
            message="Request rate or data volume limit exceeded for this data collection rule.",
        )

    def delay_next(self, count: int | None = 1, seconds: float = 1.0) -> None:
        """Process the next ``count`` requests normally but answer only after ``seconds``."""
        self._faults.delay(count, seconds)

    def drop_next(self, count: int | None = 1) -> None:
        """Read the next ``count`` requests, then close the connection without answering (nothing
        stored)."""
        self._faults.drop(count)

    def clear_faults(self) -> None:
        self._faults.clear()

    def set_allowed_subjects(self, subjects: Iterable[str] | None) -> None:
        """Who holds Monitoring Metrics Publisher on the DCRs; ``None``: any valid token."""
        self.allowed_subjects = None if subjects is None else frozenset(subjects)

    # ------------------------------------------------------------------ records

    def records(self, stream: str) -> list[dict[str, Any]]:
        """A copy of the records accepted on ``stream``, in arrival order."""
        return self._records.records(stream)

    def wait_for(self, stream: str, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait until at least ``count`` records were accepted on ``stream``; TimeoutError
        otherwise."""
        return self._records.wait_for(stream, count, timeout)

    def stats(self, stream: str) -> StreamStats:
        return self._records.stats(stream)

    def history(self) -> list[RequestLog]:
        """Every ingestion POST answered so far (the last 100,000), in order."""
        return self._records.history()

    def reset(self) -> None:
        """Forget accepted records, stats, history, rate windows and faults."""
        self._records.reset()
        self._faults.clear()
        self._rate.reset()
