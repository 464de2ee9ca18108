"""Transports that answer from a script, plugged into the real SDKs through their public transport
interfaces, so a sink's whole ``send`` runs (the SDK's pipeline included) in microseconds:

* ``ScriptedHttpTransport``: azure-core's ``HttpTransport`` (``LogsIngestionClient(transport=)``),
  answering with ``CannedResponse`` (azure-core's ``rest.HttpResponse`` ABC, "use this abstract
  base class to create your own transport responses") or raising what azure-core's own requests
  transport raises (``ServiceRequestError``, ``ServiceResponseError``);
* ``scripted_httpx``: an ``httpx.MockTransport`` answering from the same kind of script;
* ``FakeCredential``: azure-core's ``TokenCredential`` protocol, a new token per credential, so a
  test sees a renewed credential in the next request's Authorization header.

A step of a script is ``(status, headers, body)`` or an exception instance to raise. Nothing here
stands in for our own code: the sinks, their answer tables and the SDKs are the real ones.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any, Self

import httpx
from azure.core.credentials import AccessToken
from azure.core.pipeline.transport import HttpTransport
from azure.core.rest import HttpRequest, HttpResponse
from azure.core.utils import CaseInsensitiveDict

Step = tuple[int, dict[str, str], bytes] | BaseException


def error_body(code: str, message: str) -> bytes:
    """The body Azure services answer an error with."""
    return json.dumps({"error": {"code": code, "message": message}}).encode()


class FakeCredential:
    """A token credential whose tokens are numbered by credential: ``token-1``, ``token-2``…"""

    made = itertools.count(1)

    def __init__(self) -> None:
        self.token = f"token-{next(self.made)}"
        self.closed = False

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(self.token, int(time.time()) + 3600)

    def close(self) -> None:
        self.closed = True


class CannedResponse(HttpResponse):
    """A whole response in memory."""

    def __init__(self, request: HttpRequest, status: int, headers: dict[str, str], body: bytes):
        self._request = request
        self._status = status
        self._headers = CaseInsensitiveDict(headers)
        self._body = body
        self._encoding: str | None = None

    request = property(lambda self: self._request)
    status_code = property(lambda self: self._status)
    headers = property(lambda self: self._headers)
    reason = property(lambda self: "Canned")
    content_type = property(lambda self: self._headers.get("Content-Type"))
    is_closed = property(lambda self: True)
    is_stream_consumed = property(lambda self: True)
    url = property(lambda self: self._request.url)
    content = property(lambda self: self._body)

    @property
    def encoding(self) -> str | None:
        return self._encoding

    @encoding.setter
    def encoding(self, value: str | None) -> None:
        self._encoding = value

    def text(self, encoding: str | None = None) -> str:
        return self._body.decode(encoding or "utf-8")

    def json(self) -> Any:
        return json.loads(self._body)

    def raise_for_status(self) -> None:
        from azure.core.exceptions import HttpResponseError

        if self._status >= 400:
            raise HttpResponseError(response=self)

    def read(self) -> bytes:
        return self._body

    def iter_raw(self, **kwargs: Any) -> Iterator[bytes]:
        yield self._body

    def iter_bytes(self, **kwargs: Any) -> Iterator[bytes]:
        yield self._body

    def close(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *args: object) -> None:
        pass


class ScriptedHttpTransport(HttpTransport):
    """Answers each request with the next step; records what was sent (headers and body)."""

    def __init__(self, script: Sequence[Step]) -> None:
        self.script = list(script)
        self.sent: list[tuple[MutableMapping[str, str], bytes]] = []

    def send(self, request: HttpRequest, **kwargs: Any) -> CannedResponse:
        body = request.content if isinstance(request.content, bytes) else request.content.read()
        self.sent.append((request.headers, body))
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        status, headers, payload = step
        return CannedResponse(request, status, headers, payload)

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *args: object) -> None:
        pass


class _Body(httpx.AsyncByteStream):
    """A body that arrives as a stream, as from the network (``content=`` would be read at once,
    and a client that streams the answer could not read it again)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self):  # type: ignore[override]
        yield self.data


def scripted_httpx(script: Sequence[Step], sent: list[httpx.Request]) -> httpx.MockTransport:
    """An httpx transport answering each request with the next step (``sent`` collects them)."""
    steps = list(script)

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        step = steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        status, headers, body = step
        return httpx.Response(status, headers=headers, stream=_Body(body))

    return httpx.MockTransport(handler)
