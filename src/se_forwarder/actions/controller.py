"""Acting on events, beside the poll loop: the policy's decisions, hooks before and after the
impact, and approvals.

The agent builds one ``Actions``, starts it once its recorder exists, hands it every committed
batch of records (``on_records``, on the poll thread: it only decides and hands work to a thread,
so polling is never held up) and stops it at shutdown. Work for one event runs on that event's
own lane, one step after another (hooks in order, then the approval); different events run side
by side. With the default policy (observe only) nothing here starts a thread or costs a poll
anything.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import logs, tracker
from ..approvals import Approver, client_for
from ..clock import SYSTEM, Clock
from ..hooks import Journal
from ..hooks.runner import Running
from ..hooks.states import HookState
from ..imds.client import ImdsClient, RateLimiter
from ..model import EventStatus, LifecycleRecord, Phase
from ..policy import Decision, Policy, PolicyConfig
from ..policy.words import decision as decision_words
from ..recording.recorder import Recorder
from ..timefmt import parse_iso_ms
from .book import Book
from .hookstep import POST, PRE, HookSteps
from .intents import Intents
from .notify import Notifier
from .service_gate import ServiceGate
from .stats import ActionStats

if TYPE_CHECKING:
    from ..identity.config import IdentityConfig
    from ..imds.config import ImdsConfig
    from ..outbox import Store


AFTER_HOOKS = ("after-hooks", "service")  # approvals sent once the pre-hooks succeeded


class Actions(HookSteps):
    def __init__(
        self,
        config: PolicyConfig,
        journal: Journal,
        approvals_client: Callable[[], ImdsClient] | None,
        clock: Clock = SYSTEM,
        wake: Callable[[], None] | None = None,
        identity: IdentityConfig | None = None,
    ) -> None:
        self.clock = clock
        self.policy = Policy(config)
        self.enabled = config.acts
        self.journal = journal
        self.log = logs.get("actions")
        self.notify = Notifier(journal.store, self.log, clock, wake)  # failures told once, durably
        self.book = Book(self.policy, journal, self.log, on_change=self._acted)
        self._pre_ran: set[str] = set()  # events whose pre-hooks ran (or would, in a dry run)
        self.recorder: Recorder | None = None
        self._lock = threading.Lock()
        self._open: dict[str, str] = {}  # EventId -> last status (the approver asks)
        self._approved: set[str] = set()
        self._resent: set[str] = set()  # approvals sent again after a restart (intents.py)
        self._lanes: dict[str, threading.Thread] = {}
        self._running: set[Running] = set()
        self._interrupted: set[str] = set()  # journal keys already counted as failed this run
        self._counts = {"ok": 0, "failed": 0, "dry": 0, "secrets_refused": 0}
        self._stopping = threading.Event()
        self._resume_pending = False  # open events wait for the VM's name (start, identified)
        self.approver: Approver | None = None
        if self.enabled and not config.dry_run and approvals_client is not None:
            self.approver = Approver(
                approvals_client(),
                self._on_approved,
                still_wanted=self._still_wanted,
                stop=clock.event(),
                clock=clock,
                on_given_up=self._given_up,
            )
        self.intents = Intents(journal.store, self.log)  # approvals on their way (kill -9)
        self.gate: ServiceGate | None = None  # approve = "service": the coordinator admits first
        if self.approver is not None and config.service is not None:
            self.gate = ServiceGate(
                config.service, identity, self.book, clock, self.log, store=journal.store
            )

    @classmethod
    def build(
        cls,
        config: PolicyConfig,
        store: Store,
        imds: ImdsConfig,
        limiter: RateLimiter,
        clock: Clock = SYSTEM,
        wake: Callable[[], None] | None = None,
        identity: IdentityConfig | None = None,
    ) -> Actions:
        """From the configuration: approvals over their own IMDS connection, inside the poll
        loop's request budget (``approvals.client_for``); ``wake``: the delivery workers, when
        a notice was committed."""
        return cls(config, Journal(store), client_for(imds, limiter, clock), clock, wake, identity)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, recorder: Recorder) -> None:
        """Take up the events open at start: a hook that never ran runs now, an approval that
        followed a hook that succeeded before a crash is sent now (never the hook again). Not
        before the VM's name is known (``identified``): without it no event affects this VM."""
        if not self.enabled:
            return
        self.recorder = recorder
        if self.approver is not None:
            self.approver.start()
            self._on_their_way(recorder)
        self._resume_pending = not recorder.vm.VmName
        if self._resume_pending:
            logs.event(
                self.log,
                logging.INFO,
                "open events are taken up once the instance document answers",
                events=len(recorder.state.events),
            )
        else:
            self._resume(recorder)

    def _on_their_way(self, recorder: Recorder) -> None:
        """Approvals a kill -9 caught between their POST and their record (intents.py)."""
        at = self.clock.wall_ms()
        for eid, (nb, acted) in self.intents.pending().items():
            te = recorder.state.events.get(eid)
            if te is None or te.approved or at >= nb or te.view.status != EventStatus.SCHEDULED:
                logs.event(
                    self.log,
                    logging.WARNING if te is not None and not te.approved else logging.INFO,
                    "an approval sent before a restart: its answer is unknown",
                    EventId=eid,
                )
                self.intents.done(eid)
                continue
            if acted:
                recorder.acted(eid, acted)
            recorder.approved(at, [eid])  # before the first poll: who let it start is known
            with self._lock:
                self._open[eid], self._resent = te.view.status, self._resent | {eid}
            if self.approver is not None:
                self.approver.submit(eid, nb)

    def identified(self) -> None:
        """The VM's identity is known (the instance document answered)."""
        if self.enabled and self._resume_pending and self.recorder is not None:
            self._resume_pending = False
            self._resume(self.recorder)

    def _resume(self, recorder: Recorder) -> None:
        state = recorder.state
        at = self.clock.wall_ms()
        for eid, te in state.events.items():
            self._open[eid] = te.view.status
            if te.approved:
                self._approved.add(eid)
            record = tracker.view_record(state, eid, Phase.FIRST_SEEN, at, recorder.vm)
            self.notify.seen(record)
            self._first_seen(record, resumed=True)
        self.notify.prune(set(state.events))
        gate = self.gate
        if gate is not None:  # slots of events that ended while this agent was down: back
            for eid, (service, key) in gate.held().items():
                if eid not in state.events:
                    self._lane(eid, functools.partial(gate.give_back, eid, service, key))
        try:
            self.journal.prune(set(state.events), at)
        except Exception as exc:
            logs.event(self.log, logging.WARNING, "cannot prune the hook journal", error=str(exc))

    def stop(self, grace: float = 2.0) -> None:
        """Let running hooks finish for ``grace`` seconds, then kill their process groups (a
        hook killed here is not run again after the restart, and its approval is not sent)."""
        if not self.enabled:
            return
        self._stopping.set()
        if self.gate is not None:
            self.gate.stop()
        deadline = self.clock.monotonic() + grace  # hooks are processes: their lanes are joined
        for lane in list(self._lanes.values()):
            lane.join(max(0.0, deadline - self.clock.monotonic()))
        with self._lock:
            running = list(self._running)
        for r in running:
            r.kill(HookState.STOPPED)
        for lane in list(self._lanes.values()):
            lane.join(2.0)
        if self.approver is not None:
            self.approver.stop()

    def stats(self) -> ActionStats:
        a = self.approver.stats if self.approver else None
        with self._lock:
            return ActionStats(
                len(self._running),
                self._counts["ok"],
                self._counts["failed"],
                a.sent if a else 0,
                a.failed if a else 0,
                self._counts["dry"],
                self.policy.dry_run,
                self.book.lines(),
                self._counts["secrets_refused"],
            )

    # -- records in ---------------------------------------------------------------------------

    def on_records(self, records: list[LifecycleRecord]) -> None:
        """Committed records (poll thread, or the approvals thread for ``Approved``)."""
        if not self.enabled or self._stopping.is_set():
            return
        for r in records:
            with self._lock:
                if r.Phase == Phase.REMOVED:
                    self._open.pop(r.EventId, None)
                elif r.Phase == Phase.APPROVED:
                    self._approved.add(r.EventId)
                else:
                    self._open[r.EventId] = r.EventStatus
            self.notify.seen(r)
            if r.Phase == Phase.FIRST_SEEN:
                self._first_seen(r)
            elif r.Phase == Phase.UPDATED:
                self._updated(r)
            elif r.Phase == Phase.REMOVED:
                self._removed(r)

    def _first_seen(self, r: LifecycleRecord, *, resumed: bool = False) -> None:
        d = self.book.decide(r, self.clock.wall_ms())
        if not d.acts_here or d.rule is None or not d.rule.acts:
            return
        logs.event(
            self.log,
            logging.INFO,
            "policy decision",
            EventId=r.EventId,
            EventType=r.EventType,
            decision=decision_words(d, self.policy.dry_run),
            resumed=resumed,
        )
        if d.approve == "at-once":
            self._approve(r, d)
        if d.pre_hooks or d.approve in AFTER_HOOKS:
            self._lane_pre(r, d, rerun=None)

    def _updated(self, r: LifecycleRecord) -> None:
        d = self.book.decide(r, self.clock.wall_ms())
        if not (d.pre_hooks or d.approve != "never"):
            return
        rerun = f"{PRE}@{r.DocumentIncarnation}" if d.rule and d.rule.rerun_on_update else None
        if d.approve == "at-once":
            self._approve(r, d)
        self._lane_pre(r, d, rerun=rerun)

    def _removed(self, r: LifecycleRecord) -> None:
        d = self.book.decide(r, self.clock.wall_ms())
        if d.post_hooks:
            self._lane(r.EventId, lambda: self._post(r, d))
        gate, recorder = self.gate, self.recorder
        if gate is not None and recorder is not None and d.rule and d.rule.approve == "service":
            vm = recorder.vm  # the slot goes back once the hooks after it are done
            self._lane(r.EventId, lambda: gate.release(r, vm))

    # -- work on an event's lane --------------------------------------------------------------

    def _lane(self, eid: str, work: Callable[[], None]) -> None:
        """Run ``work`` after whatever is already under way for this event."""
        with self._lock:
            self._lanes = {k: t for k, t in self._lanes.items() if t.is_alive()}
            before = self._lanes.get(eid)

            def step() -> None:
                if before is not None:
                    before.join()
                if self._stopping.is_set():
                    return
                try:
                    work()
                except Exception as exc:  # a bug: one line, counted, the lane goes on
                    self._count("failed")
                    self.log.error(
                        "internal error while acting on an event; its remaining "
                        "hooks and approval are not done (please report it)",
                        exc_info=exc,
                        extra={"fields": {"EventId": eid}},
                    )

            lane = threading.Thread(target=step, name=f"event-{eid[:8]}", daemon=True)
            self._lanes[eid] = lane
        self.clock.track(lane)
        lane.start()

    def _lane_pre(self, r: LifecycleRecord, d: Decision, rerun: str | None) -> None:
        """The pre-hooks (then the approval) on the event's lane; while they are queued or run,
        an event seen Started gets a notice."""
        if d.pre_hooks:
            self.notify.queued(r.EventId)

        def work() -> None:
            try:
                self._pre(r, d, rerun)
            finally:
                if d.pre_hooks:
                    self.notify.done(r.EventId)

        self._lane(r.EventId, work)

    def _pre(self, r: LifecycleRecord, d: Decision, rerun: str | None) -> None:
        for i, name in enumerate(d.pre_hooks):
            with self._lock:
                gone = r.EventId not in self._open
            if gone:  # it ended before this hook's turn (e.g. while the agent was down)
                logs.event(
                    self.log,
                    logging.INFO,
                    "hook not run: the event has ended",
                    EventId=r.EventId,
                    hook=name,
                )
                return
            self.notify.running(r.EventId, name)
            done = self.journal.get(r.EventId, PRE, name)
            phase = PRE if done is None else rerun
            then = _after_failure(d, d.pre_hooks[i + 1 :])
            ok = self._hook(r, name, phase, PRE, then) if phase else self._judge(r, PRE, name, then)
            if not ok:
                if d.approve in AFTER_HOOKS and ok is not None:  # None: said in an earlier run
                    logs.event(
                        self.log,
                        logging.WARNING,
                        "not approved: a hook before it did not succeed",
                        EventId=r.EventId,
                        hook=name,
                    )
                return
        if d.approve in AFTER_HOOKS:
            self._approve(r, d)

    def _post(self, r: LifecycleRecord, d: Decision) -> None:
        """The post-hooks, on the event's lane (after its pre-hooks): a pair with them, so only
        if one of them ran here, unless the rule says they run alone (or has none)."""
        alone = not d.pre_hooks or (d.rule is not None and d.rule.post_hooks_alone)
        with self._lock:
            ran = r.EventId in self._pre_ran
        if not (alone or ran or self.journal.ran(r.EventId, PRE, d.pre_hooks)):
            logs.event(
                self.log,
                logging.INFO,
                "hooks after it not run: no hook before it ran for this event",
                EventId=r.EventId,
                hooks=list(d.post_hooks),
                rule=d.label,
            )
            for name in d.post_hooks:
                self.book.hook(r.EventId, name, True, "not run: no hook before it ran")
            return
        for name in d.post_hooks:
            self._hook(r, name, POST, POST)

    # -- approvals ----------------------------------------------------------------------------

    def _approve(self, r: LifecycleRecord, d: Decision) -> None:
        if not d.may_approve or not r.NotBefore:
            if d.why_not:
                self.book.approval(r.EventId, f"not approved here: {d.why_not}")
            return
        with self._lock:
            if r.EventId in self._approved:
                return
        if self.policy.dry_run:
            self._count("dry")
            logs.event(
                self.log, logging.INFO, "dry run: would approve", EventId=r.EventId, rule=d.label
            )
            self.book.approval(r.EventId, "would approve (dry run)")
            return
        if d.approve == "service" and not self._admitted(r):
            return
        if self.approver is not None:
            self.book.approval(r.EventId, "approval sent")
            acted = self.book.would_read(r.EventId, self._approved_words(r.EventId))
            self.intents.keep(r.EventId, parse_iso_ms(r.NotBefore), acted)
            self.approver.submit(r.EventId, parse_iso_ms(r.NotBefore))

    def _admitted(self, r: LifecycleRecord) -> bool:
        """The service's coordinator let this VM in (on the event's lane: it may wait)."""
        if self.gate is None or self.recorder is None:
            return False
        return self.gate.admitted(r, self.recorder.vm, lambda: self._still_wanted(r.EventId))

    def _still_wanted(self, eid: str) -> bool:
        with self._lock:
            return self._open.get(eid) not in (None, EventStatus.STARTED) and (
                eid not in self._approved or eid in self._resent
            )

    def _approved_words(self, eid: str) -> str:
        via = self.gate.via(eid) if self.gate is not None else None
        return "approved by this VM" + (f" (service {via})" if via else "")

    def _on_approved(self, eid: str) -> None:
        self.book.approval(eid, self._approved_words(eid))
        if self.recorder is not None:
            self.recorder.approved(self.recorder.now(), [eid])
        self.intents.done(eid)

    def _given_up(self, eid: str, why: str) -> None:
        self.intents.done(eid)
        self.book.approval(eid, f"approval given up ({why})")
        self.notify.approval_given_up(eid, why)

    def _acted(self, eid: str, text: str) -> None:
        """What the event got, kept with it: its next records carry it (``Acted``)."""
        if self.recorder is not None:
            self.recorder.acted(eid, text)

    def _count(self, what: str) -> None:
        with self._lock:
            self._counts[what] += 1


def _after_failure(d: Decision, rest: tuple[str, ...]) -> str:
    """What a pre-hook's failure means for its event, as its notice says it."""
    parts = [f"not run: {', '.join(rest)}"] if rest else []
    if d.approve in AFTER_HOOKS:
        parts.append("not approved: it starts at NotBefore")
    return "; ".join(parts)
