"""The service's coordinator: its ``Slots`` document in Blob Storage, changed only by conditional
writes (docs/policy.md, "Early approval across a service").

Each claim or release reads the document (and storage's clock: the answer's ``Date``), decides
with ``service.admit`` and writes the result back ``If-Match`` the ETag it read (``If-None-Match:
*`` when there is none yet): a write that loses a race fails with 412 and the step starts again
from a fresh read, so two agents can never both take the last slot, nor two zones share it. Any
other failure (storage unreachable, refused, slow) is a "no": the agent does not approve, and
Azure starts the event at NotBefore. azure-storage-blob is imported here only, and this module
only when the policy configures a coordinator.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.storage.blob import ContainerClient

from .. import logs
from ..timefmt import parse_http_date_ms
from .service import Request, Slots, Spread, admit, release

ATTEMPTS = 8  # lost races in a row before giving up (a "no": fail safe)
# one change: the document and storage's now in; the document to write (None: none) and the answer
Step = Callable[[Slots, int], tuple[Slots | None, tuple[bool, str]]]


class Coordinator:
    def __init__(
        self,
        container: ContainerClient,
        service: str,
        *,
        limit: int,
        spread: Spread,
        bound_seconds: float,
        log: logging.Logger | None = None,
    ) -> None:
        self.blob = container.get_blob_client(f"services/{quote(service, safe='')}.json")
        self.service, self.limit, self.spread = service, limit, spread
        self.bound_ms = round(bound_seconds * 1000)
        self.log = log or logs.get("coordinator")
        self._date: str | None = None

    def claim(self, req: Request) -> tuple[bool, str]:
        """(admitted, why): a slot for ``req``'s VM, or why not; never raises."""

        def step(slots: Slots, now_ms: int) -> tuple[Slots | None, tuple[bool, str]]:
            decided = admit(
                slots,
                req,
                now_ms=now_ms,
                limit=self.limit,
                spread=self.spread,
                bound_ms=self.bound_ms,
            )
            write = decided.slots if decided.slots != slots else None
            return write, (decided.admitted, decided.why)

        return self._change(step, req.key, "not approved early (it starts at NotBefore)")

    def release(self, key: str) -> tuple[bool, str]:
        """Give the slot of ``key`` back (its event is over); (done, why), never raises."""

        def step(slots: Slots, now_ms: int) -> tuple[Slots | None, tuple[bool, str]]:
            if key not in slots.holders:
                return None, (True, "no slot held")
            return release(slots, key), (True, "slot given back")

        return self._change(step, key, "slot not given back yet")

    def _change(self, step: Step, key: str, unreachable: str) -> tuple[bool, str]:
        for _ in range(ATTEMPTS):
            try:
                slots, etag, now_ms = self._read()
                write, answer = step(slots, now_ms)
                if write is not None:
                    self._write(write, etag)
                return answer
            except (ResourceModifiedError, ResourceExistsError):
                continue  # someone wrote in between: decide again on what they wrote
            except (AzureError, OSError, ValueError) as exc:
                logs.event(
                    self.log,
                    logging.WARNING,
                    f"service coordinator unreachable: {unreachable}",
                    service=self.service,
                    key=key,
                    error=f"{type(exc).__name__}: {str(exc)[:200]}",
                )
                return False, "coordinator unreachable"
        return False, f"lost {ATTEMPTS} races for the service's document in a row"

    def _hook(self, response: Any) -> None:
        self._date = response.http_response.headers.get("Date")

    def _now(self) -> int:
        if not self._date:
            raise ValueError("storage's answer had no Date: its clock is unknown")
        return parse_http_date_ms(self._date)

    def _read(self) -> tuple[Slots, str | None, int]:
        self._date = None
        try:
            got = self.blob.download_blob(raw_response_hook=self._hook)
        except ResourceNotFoundError:
            return Slots(), None, self._now()
        return Slots.from_json(got.readall()), got.properties.etag, self._now()

    def _write(self, slots: Slots, etag: str | None) -> None:
        data = slots.to_json().encode("utf-8")
        if etag is None:
            self.blob.upload_blob(data, overwrite=False)
        else:
            self.blob.upload_blob(
                data, overwrite=True, etag=etag, match_condition=MatchConditions.IfNotModified
            )
