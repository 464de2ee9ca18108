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

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import logs, redact, tracker
from ..approvals import Approver
from ..clock import SYSTEM, Clock
from ..hooks import Journal
from ..hooks.environment import environment, raw_variables, unsafe_characters
from ..hooks.runner import HookRun, Running, run
from ..hooks.states import HookState
from ..imds.client import ImdsClient, RateLimiter
from ..model import EventStatus, LifecycleRecord, Phase
from ..policy import Decision, Policy, PolicyConfig
from ..policy.words import decision as decision_words
from ..recording.recorder import Recorder
from ..timefmt import parse_iso_ms
from .notify import Notifier
from .stats import ActionStats

if TYPE_CHECKING:
    from ..imds.config import ImdsConfig
    from ..outbox import Store

PRE, POST = "pre", "post"


class Actions:
    def __init__(
        self,
        config: PolicyConfig,
        journal: Journal,
        approvals_client: Callable[[], ImdsClient] | None,
        clock: Clock = SYSTEM,
        wake: Callable[[], None] | None = None,
    ) -> None:
        self.clock = clock
        self.policy = Policy(config)
        self.enabled = config.acts
        self.journal = journal
        self.log = logs.get("actions")
        self.notify = Notifier(journal.store, self.log, clock, wake)  # failures told once, durably
        self.recorder: Recorder | None = None
        self._lock = threading.Lock()
        self._open: dict[str, str] = {}  # EventId -> last status (the approver asks)
        self._approved: set[str] = set()
        self._lanes: dict[str, threading.Thread] = {}
        self._running: set[Running] = set()
        self._interrupted: set[str] = set()  # journal keys already counted as failed this run
        self._counts = {"ok": 0, "failed": 0, "dry": 0}
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
                on_given_up=self.notify.approval_given_up,
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
    ) -> Actions:
        """From the configuration: approvals over their own IMDS connection (``http.client`` is
        not thread-safe), inside the poll loop's request budget (one budget per VM); ``wake``:
        the delivery workers, when a notice was committed."""

        def client() -> ImdsClient:
            return ImdsClient(
                imds.endpoint,
                api_version=imds.api_version,
                timeout=imds.timeout,
                first_call_timeout=imds.timeout,
                limiter=limiter,
                clock=clock,
            )

        return cls(config, Journal(store), client, clock, wake)

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
        d = self.policy.decide(r)
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
        if d.pre_hooks or d.approve == "after-hooks":
            self._lane_pre(r, d, rerun=None)

    def _updated(self, r: LifecycleRecord) -> None:
        d = self.policy.decide(r)
        if not (d.pre_hooks or d.approve != "never"):
            return
        rerun = f"{PRE}@{r.DocumentIncarnation}" if d.rule and d.rule.rerun_on_update else None
        if d.approve == "at-once":
            self._approve(r, d)
        self._lane_pre(r, d, rerun=rerun)

    def _removed(self, r: LifecycleRecord) -> None:
        d = self.policy.decide(r)
        if d.post_hooks:
            self._lane(r.EventId, lambda: self._post(r, d))

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
                if d.approve == "after-hooks" and ok is not None:  # None: said in an earlier run
                    logs.event(
                        self.log,
                        logging.WARNING,
                        "not approved: a hook before it did not succeed",
                        EventId=r.EventId,
                        hook=name,
                    )
                return
        if d.approve == "after-hooks":
            self._approve(r, d)

    def _post(self, r: LifecycleRecord, d: Decision) -> None:
        for name in d.post_hooks:
            self._hook(r, name, POST, POST)

    def _judge(self, r: LifecycleRecord, phase: str, hook: str, then: str = "") -> bool | None:
        """A hook that has a journal entry already: True if it succeeded, False if it failed and
        that is reported now, None if it failed and was reported before (by this run, or by an
        earlier one: every restart used to report interrupted hooks again). One claimed with
        no result ran when the agent died: a failure, recorded as interrupted, told once, never
        run again."""
        eid = r.EventId
        entry = self.journal.get(eid, phase, hook)
        if entry is None or entry.state == HookState.OK:
            return entry is not None
        key = Journal.key(eid, phase, hook)
        if entry.state != HookState.STARTED or key in self._interrupted:
            return None
        self._interrupted.add(key)  # once in this run even if the journal cannot be written
        try:
            self.journal.interrupted(eid, phase, hook, entry)
        except Exception as exc:
            logs.event(
                self.log,
                logging.WARNING,
                "cannot record an interrupted hook",
                EventId=eid,
                hook=hook,
                phase=phase,
                error=str(exc),
            )
        self._count("failed")
        logs.event(
            self.log,
            logging.ERROR,
            "hook was interrupted by a restart of the agent; not run again (at most once)",
            EventId=eid,
            hook=hook,
            phase=phase,
        )
        self.notify.hook_failed(r, hook, phase, HookState.INTERRUPTED, consequence=then)
        return False

    def _hook(
        self, r: LifecycleRecord, name: str, phase: str, hook_phase: str, then: str = ""
    ) -> bool | None:
        """Run one hook (at most once); ``then``: what its failure means for the event."""
        fields = {"EventId": r.EventId, "hook": name, "phase": phase}
        if self.policy.dry_run:
            self._count("dry")
            logs.event(
                self.log,
                logging.INFO,
                "dry run: would run hook",
                **fields,
                command=[redact.setting(a) for a in self.policy.config.hooks[name].argv()],
            )
            return True
        try:
            if not self.journal.claim(r.EventId, phase, name, self.clock.wall_ms()):
                return self._judge(r, phase, name, then)
        except Exception as exc:
            self._count("failed")
            logs.event(
                self.log,
                logging.ERROR,
                "hook not run: cannot record it in the state database",
                **fields,
                error=str(exc),
            )
            return False
        try:
            result = self._execute(r, name, hook_phase, fields)
        except Exception as exc:  # a bug: the hook failed, and that is recorded
            self.log.error(
                "hook not run: internal error (please report it)",
                exc_info=exc,
                extra={"fields": fields},
            )
            result = HookRun(HookState.ERROR, None, 0.0, 0)
        try:
            self.journal.finish(
                r.EventId, phase, name, result.state, self.clock.wall_ms(), result.exit_code
            )
        except Exception as exc:
            logs.event(
                self.log, logging.ERROR, "cannot record a hook's result", **fields, error=str(exc)
            )
        self._count("ok" if result.ok else "failed")
        if not result.ok:
            self.notify.hook_failed(
                r,
                name,
                phase,
                result.state,
                result.exit_code,
                timeout=self.policy.config.hooks[name].timeout,
                consequence=then,
            )
        return result.ok

    def _execute(self, r: LifecycleRecord, name: str, hook_phase: str, fields: dict) -> HookRun:
        hook = self.policy.config.hooks[name]
        at = self.clock.wall_ms()
        env = environment(r, hook=name, hook_phase=hook_phase, now_ms=at, extra=hook.env)
        replaced = unsafe_characters(raw_variables(r, hook=name, hook_phase=hook_phase, now_ms=at))
        if replaced:  # the whole text is on stdin; the environment holds one safe line
            fields = {**fields, "env_characters_replaced": replaced}
        running = Running()
        with self._lock:
            self._running.add(running)
        try:
            return run(
                hook.argv(),
                env,
                (r.to_json() + "\n").encode("utf-8"),
                hook.timeout,
                log=self.log,
                fields=fields,
                running=running,
                clock=self.clock,
            )
        finally:
            with self._lock:
                self._running.discard(running)

    # -- approvals ----------------------------------------------------------------------------

    def _approve(self, r: LifecycleRecord, d: Decision) -> None:
        if not d.may_approve or not r.NotBefore:
            return
        with self._lock:
            if r.EventId in self._approved:
                return
        if self.policy.dry_run:
            self._count("dry")
            logs.event(
                self.log, logging.INFO, "dry run: would approve", EventId=r.EventId, rule=d.label
            )
            return
        if self.approver is not None:
            self.approver.submit(r.EventId, parse_iso_ms(r.NotBefore))

    def _still_wanted(self, eid: str) -> bool:
        with self._lock:
            return (
                self._open.get(eid) not in (None, EventStatus.STARTED) and eid not in self._approved
            )

    def _on_approved(self, eid: str) -> None:
        if self.recorder is not None:
            self.recorder.approved(self.recorder.now(), [eid])

    def _count(self, what: str) -> None:
        with self._lock:
            self._counts[what] += 1


def _after_failure(d: Decision, rest: tuple[str, ...]) -> str:
    """What a pre-hook's failure means for its event, as its notice says it."""
    parts = [f"not run: {', '.join(rest)}"] if rest else []
    if d.approve == "after-hooks":
        parts.append("not approved: it starts at NotBefore")
    return "; ".join(parts)
