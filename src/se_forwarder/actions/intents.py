"""Approvals on their way: an approval about to be sent is kept in the state database
(``approving/<EventId>``, with its NotBefore) until its answer is seen or it is given up.

A kill -9 between the ``StartRequests`` POST and the ``Approved`` record would lose the record of
the decision (IMDS took the approval, the event started early, and the agent back found it
``Started``: "approved elsewhere"). At the next start, before the first poll, an approval still on
its way, for an event still open and before its NotBefore, gets its ``Approved`` record and is
sent again (IMDS takes an approval it already has). One already past its NotBefore is dropped
with one log line: the event started then anyway, and whether the POST left is unknown.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import logs

if TYPE_CHECKING:
    from ..outbox import Store

PREFIX = "approving/"


class Intents:
    def __init__(self, store: Store, log: logging.Logger) -> None:
        self.store, self.log = store, log

    def keep(self, eid: str, not_before_ms: int, acted: str | None) -> None:
        """``acted``: what the event's records say once it is approved (``Acted``)."""
        value = {"NotBefore": not_before_ms, "Acted": acted}
        self._do(lambda: self.store.save(PREFIX + eid, value), eid)

    def done(self, eid: str) -> None:
        self._do(lambda: self.store.forget([PREFIX + eid]), eid)

    def pending(self) -> dict[str, tuple[int, str | None]]:
        """EventId -> (NotBefore in epoch ms, Acted) of the approvals a previous run left on
        their way."""
        try:
            saved = self.store.scan(PREFIX)
        except Exception as exc:
            logs.event(self.log, logging.WARNING, "cannot read approvals", error=str(exc))
            return {}
        return {
            k[len(PREFIX) :]: (int(v["NotBefore"]), v.get("Acted") or None)
            for k, v in saved.items()
        }

    def _do(self, work: Callable[[], None], eid: str) -> None:
        try:
            work()
        except Exception as exc:  # the approval goes on: only its record after a kill is at risk
            logs.event(
                self.log, logging.WARNING, "cannot keep an approval", EventId=eid, error=str(exc)
            )
