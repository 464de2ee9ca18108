"""The collector's approvals (``[collector.preview_acknowledge]``): every ``interval`` seconds,
each Scheduled event of its view decided by ``ack_policy.View``; an approval sent through Azure's
acknowledge API (``ack_client``), claimed durably first (``ack:<EventId>`` in the state
database: never sent twice, even across a kill -9), retried on 429, 5xx and no answer with the
one backoff (Retry-After honoured) until NotBefore; each outcome one Approval row per VM, a
counter, and a log line where a person must act."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .. import logs
from ..backoff import FAST, after_retry_after
from ..clock import Clock
from ..errors import StateError
from ..model import ApprovedBy
from ..outbox import Store
from .ack_client import AckAnswer, AckClient
from .ack_config import PreviewAcknowledge
from .ack_policy import Event, View, inventory_vms
from .agents import AgentsView
from .record import InventoryVm, PlatformRecord, approval_rows
from .stats import AckStats
from .writer import Writer

log = logs.get("collector")
CLAIM = "ack:"
ROLE = "Scheduled Event Contributor"


def outcome(answer: AckAnswer) -> tuple[str, str | None, str]:
    """(words for Acted, ApprovedBy, the counter) of a final answer."""
    detail = f"{answer.status} {answer.code}".strip()
    if answer.status == 200:
        return "approved by the collector", ApprovedBy.COLLECTOR, "ack_approved"
    if answer.status == 404:
        return (
            f"not approved: Azure does not know this event ({detail})",
            None,
            "ack_unknown_events",
        )
    if answer.status == 409:
        return f"started before approval ({detail})", None, "ack_started_before"
    if answer.status == 403:
        return (
            f"not approved: the collector's identity lacks {ROLE} ({detail})",
            None,
            "ack_forbidden",
        )
    return f"not approved: {detail}: {answer.message}", None, "ack_failed"


def retryable(answer: AckAnswer) -> bool:
    return answer.status in (0, 408, 429) or answer.status >= 500


class Approvals:
    def __init__(
        self,
        cfg: PreviewAcknowledge,
        credential: Any,
        writer: Writer,
        store: Store,
        notify: Callable[[], None],
        clock: Clock,
    ) -> None:
        self.cfg, self.writer, self.store, self.notify, self.clock = (
            cfg,
            writer,
            store,
            notify,
            clock,
        )
        self.view = View(cfg)
        self.stats = AckStats()
        ca = str(cfg.ca_file) if cfg.ca_file else None
        self.client = AckClient(cfg.endpoint, credential, cfg.api_version, clock, ca_file=ca)
        logs_ca = str(cfg.logs_ca_file) if cfg.logs_ca_file else None
        self.agents = AgentsView(
            cfg.agents_workspace_id,
            credential,
            cfg.agents_lookback_hours,
            endpoint=cfg.logs_endpoint,
            ca_file=logs_ca,
        )
        self._lock = threading.Lock()
        self._done: set[str] = set()  # decided for good (approved, refused, or never)
        self._told: set[tuple[str, str]] = set()  # (EventId, why) logged once
        self._held: set[str] = set()  # events that waited for their service's limit
        # requests to send again: EventId -> (attempt, when (wall ms), its claim)
        self._retry: dict[str, tuple[int, int, dict[str, Any]]] = {}
        self._recover()

    # -- what the channels hand over ------------------------------------------------------------

    def observe(self, rows: Iterable[PlatformRecord]) -> None:
        with self._lock:
            self.view.observe(rows, self.clock.wall_ms())

    def inventory(self, vms: Iterable[InventoryVm]) -> None:
        with self._lock:
            self.view.vms = inventory_vms(vms)

    # -- the rounds -----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        while not self.clock.wait(stop, self._next_round()):
            with contextlib.suppress(StateError):  # the writer logged it; the next round retries
                self.round(stop)

    def _next_round(self) -> float:
        """Seconds to the next round: ``interval``, or sooner when a retry is due."""
        due = min((at for _, at, _ in self._retry.values()), default=None)
        if due is None:
            return self.cfg.interval
        return max(0.0, min(self.cfg.interval, (due - self.clock.wall_ms()) / 1000))

    def round(self, stop: threading.Event) -> None:
        self._retries(stop)
        with self._lock:
            open_ = [
                ev
                for ev in self.view.events.values()
                if ev.status == "Scheduled" and ev.event_id not in self._done
            ]
        if not open_:
            return
        watched = self._watched()
        for ev in open_:
            now = self.clock.wall_ms()
            with self._lock:
                verdict = self.view.decide(ev, watched, now)
            if verdict.act == "approve":
                self._approve(ev, f"rule {verdict.rule}")
            elif verdict.act == "never":
                self._done.add(ev.event_id)
                self.stats.ack_agent_events += verdict.reason == "agent"
                if verdict.rule is not None:  # a rule wanted it: the decision is a record too
                    self._tell(ev, logging.INFO, "not approved by the collector", verdict.why)
                    vms = list(ev.vms.values())
                    words = f"rule {verdict.rule}: not approved: {verdict.why}"
                    rows = approval_rows(ev.event_id, ev.event_type, vms, now, words, None)
                    self.writer.write([(None, rows)])
            elif verdict.act == "wait":
                if verdict.reason == "limit" and ev.event_id not in self._held:
                    self._held.add(ev.event_id)
                    self.stats.ack_held += 1
                self._tell(ev, logging.INFO, "approval waits", verdict.why)
            if stop.is_set():
                return
        with self._lock:
            gone = self.view.forget(self.clock.wall_ms())
        self.store.forget(CLAIM + k for k in gone)
        self._held -= set(gone)

    def _watched(self) -> frozenset[str] | None:
        watched, why = self.agents.watched()
        if watched is None:
            self.stats.agents_unknown += 1
            if self.stats.agents_error is None:
                logs.event(
                    log,
                    logging.ERROR,
                    "cannot read the agents' heartbeats: the collector approves nothing until "
                    "it can (it must never approve a VM that runs an agent)",
                    workspace=self.cfg.agents_workspace_id,
                    error=why,
                )
        elif self.stats.agents_error is not None:
            logs.event(log, logging.WARNING, "the agents' heartbeats are readable again")
        self.stats.agents_error = why
        return watched

    def _tell(self, ev: Event, level: int, what: str, why: str) -> None:
        if (ev.event_id, why) in self._told:
            return
        self._told.add((ev.event_id, why))
        logs.event(log, level, what, event_id=ev.event_id, event_type=ev.event_type, why=why)

    # -- one approval ---------------------------------------------------------------------------

    def _approve(self, ev: Event, rule: str) -> None:
        """Claimed durably first (never sent twice), and in impact for the service's count from
        then on, until Azure refuses it."""
        self._done.add(ev.event_id)
        now = self.clock.wall_ms()
        claim = {"at": now, "rule": rule, "type": ev.event_type, "vms": list(ev.vms.values())}
        if not self.store.claim(CLAIM + ev.event_id, claim):
            return  # asked by an earlier run: never twice
        with self._lock:
            self.view.approved[ev.event_id] = now
        self._send(ev, claim, 0)

    def _retries(self, stop: threading.Event) -> None:
        """The requests whose retry is due (429, 5xx, no answer), each once."""
        now = self.clock.wall_ms()
        for event_id, (attempt, at, claim) in list(self._retry.items()):
            if at > now or stop.is_set():
                continue
            del self._retry[event_id]
            with self._lock:
                ev = self.view.events.get(event_id)
            if ev is None or ev.status != "Scheduled":
                self._finish(event_id, ev, claim, None, "it started before Azure accepted it")
            else:
                self._send(ev, claim, attempt)

    def _send(self, ev: Event, claim: dict[str, Any], attempt: int) -> None:
        self.stats.ack_sent += 1
        answer = self.client.acknowledge(ev.resource, ev.event_id)
        if not retryable(answer):
            self._finish(ev.event_id, ev, claim, answer)
            return
        wait = (
            after_retry_after(answer.retry_after)
            if answer.retry_after is not None
            else FAST.delay(attempt)
        )
        now = self.clock.wall_ms()
        if now + wait * 1000 >= (ev.not_before_ms or 0):
            self._finish(ev.event_id, ev, claim, None, "NotBefore came first (Azure starts it)")
            return
        self.stats.ack_retries += 1
        self._retry[ev.event_id] = (attempt + 1, now + round(wait * 1000), claim)
        logs.event(
            log,
            logging.WARNING,
            "acknowledge not answered; retrying",
            event_id=ev.event_id,
            status=answer.status,
            error=answer.message or answer.code,
            seconds=round(wait, 2),
        )

    def _finish(
        self,
        event_id: str,
        ev: Event | None,
        claim: dict[str, Any],
        answer: AckAnswer | None,
        why_not: str = "",
    ) -> None:
        words, by, counter = (
            outcome(answer)
            if answer is not None
            else (f"not approved: {why_not}", None, "ack_failed")
        )
        setattr(self.stats, counter, getattr(self.stats, counter) + 1)
        if by is None:
            with self._lock:
                self.view.approved.pop(event_id, None)
        self._record(event_id, claim, f"{claim['rule']}: {words}", by)
        resource = ev.resource if ev is not None else None
        if counter == "ack_forbidden":  # a person must act: the message names the role
            logs.event(
                log,
                logging.ERROR,
                f"approval refused: the collector's identity lacks the role {ROLE} on "
                "its VMs (infra/collector.bicep assigns it on the subscription with "
                "resourceGraphReader=true and scheduledEventContributorRoleId)",
                event_id=event_id,
                resource=resource,
                error=answer.message if answer else None,
            )
        else:
            logs.event(
                log, logging.INFO, "acknowledge", event_id=event_id, resource=resource, result=words
            )

    def _record(self, event_id: str, claim: dict[str, Any], acted: str, by: str | None) -> None:
        vms = [(str(v[0]), str(v[1]), v[2]) for v in claim["vms"]]
        rows = approval_rows(event_id, claim["type"], vms, self.clock.wall_ms(), acted, by)
        self.writer.write([(None, rows)])
        self.store.save(CLAIM + event_id, claim | {"acted": acted, "by": by})
        self.notify()

    def _recover(self) -> None:
        """Approvals of an earlier run: in impact until their event ends; one asked when the
        collector died gets its record now (its outcome is unknown, it is not asked again)."""
        for key, claim in self.store.scan(CLAIM).items():
            event_id = key.removeprefix(CLAIM)
            self._done.add(event_id)
            if claim.get("by") or "acted" not in claim:
                self.view.approved[event_id] = int(claim.get("at", 0))
            if "acted" not in claim:
                words = (
                    "outcome unknown: the collector stopped while asking Azure (not asked again)"
                )
                self._record(event_id, claim, words, None)

    def close(self) -> None:
        self.client.close()
        self.agents.close()
