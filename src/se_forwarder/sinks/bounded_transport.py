"""azure-core's ``requests`` transport with every answer read within a size and an overall deadline.

azure-core reads a whole answer with per-read timeouts only: a peer answering without end, or a
byte at a time, costs memory or a hung delivery thread. Through public APIs only, the transport
here is azure-core's ``RequestsTransport`` given a ``requests.Session`` (its ``session=``) whose
``HTTPAdapter.send`` (requests' documented override point) reads each answer itself: at most
``max_bytes`` (decoded, so a compression bomb stops there too), with one deadline for the whole
answer, and hands requests the bytes read. Past either bound the connection is closed and a
``requests`` error is raised that azure-core turns into ``ServiceResponseError`` (the size) or
``ServiceResponseTimeoutError`` (the deadline), which the sinks retry.

The deadline holds between reads; one read waits at most ``min(read timeout, seconds)``, so a
silent peer ends within twice the deadline at worst. Headers are read by ``http.client`` (at most
100 lines of 64 KiB) with that per-read timeout.

Imported only by the Azure sinks (``requests`` is azure-core's dependency, never the run path's).
"""

from __future__ import annotations

import io
import time
from typing import Any

import requests
from azure.core.pipeline.transport import RequestsTransport
from requests.adapters import HTTPAdapter
from urllib3.exceptions import HTTPError, ProtocolError, ReadTimeoutError
from urllib3.util.retry import Retry

CHUNK = 64 * 1024


class BoundedAdapter(HTTPAdapter):
    """An ``HTTPAdapter`` reading each answer whole but bounded (no retries, no redirects: the
    callers own both, as with azure-core's own adapter)."""

    def __init__(self, max_bytes: int, seconds: float) -> None:
        super().__init__(max_retries=Retry(total=False, redirect=False, raise_on_status=False))
        self.max_bytes = max_bytes
        self.seconds = seconds

    def send(self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None,
             verify: Any = True, cert: Any = None, proxies: Any = None) -> requests.Response:
        deadline = time.monotonic() + self.seconds
        response = super().send(request, stream=True, timeout=self._capped(timeout),
                                verify=verify, cert=cert, proxies=proxies)
        try:
            body = self._read(response.raw, deadline, request)
        except BaseException:
            response.raw.close()  # urllib3 closes the connection: it never goes back to the pool
            raise
        response.raw.release_conn()
        response.raw = io.BytesIO(body)  # requests and azure-core read the body from here
        return response

    def _capped(self, timeout: Any) -> Any:
        """The read timeout no longer than the deadline (a silent peer ends there)."""
        if isinstance(timeout, tuple):
            connect, read = timeout
            return connect, self.seconds if read is None else min(read, self.seconds)
        return self.seconds if timeout is None else min(timeout, self.seconds)

    def _read(self, raw: Any, deadline: float, request: requests.PreparedRequest) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            try:
                data = raw.read1(min(CHUNK, self.max_bytes + 1 - size), decode_content=True)
            except ReadTimeoutError as exc:
                raise requests.exceptions.ReadTimeout(exc, request=request) from exc
            except HTTPError as exc:
                raise requests.exceptions.ConnectionError(ProtocolError(str(exc)),
                                                          request=request) from exc
            if not data:
                return b"".join(parts)
            size += len(data)
            if size > self.max_bytes:
                raise requests.exceptions.ConnectionError(ProtocolError(
                    f"answer over {self.max_bytes} bytes: connection closed"), request=request)
            if time.monotonic() > deadline:
                raise requests.exceptions.ReadTimeout(
                    f"no whole answer within {self.seconds:g} s: connection closed", request=request)
            parts.append(data)


def transport(max_bytes: int, seconds: float, **config: Any) -> RequestsTransport:
    """A new ``RequestsTransport`` (it owns and closes its session); ``config`` is azure-core's
    connection configuration (``connection_timeout``, ``read_timeout``, ``connection_verify``)."""
    session = requests.Session()
    adapter = BoundedAdapter(max_bytes, seconds)
    for prefix in ("http://", "https://"):
        session.mount(prefix, adapter)
    return RequestsTransport(session=session, session_owner=True, **config)
