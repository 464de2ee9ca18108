"""The agent on a Kubernetes node: the node's name, pool and cluster on every row, and the drain
rules acted on, beside the poll loop (as ``actions/`` is: the poll thread only hands records
over; each event's steps run on a thread of their own, one after another).

For an event that affects this VM and matches a rule: the node's condition ``ScheduledEvent``
and a ``VMEventScheduled`` event, then (by the rule) cordon, exclude from load balancers,
drain, approve early; after the event's ``Removed``, uncordon what this agent cordoned and
clear the condition. Every step gives a Kubernetes event and a record (committed once, with
its RecordId, through the same outbox). What a restart interrupted is taken up again at start.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import logs
from ..approvals import Approver
from ..clock import Clock
from ..errors import KubernetesError
from ..model import NODE_PHASES, EventStatus, LifecycleRecord, Phase, record_id
from ..outbox import OutboxRow
from ..timefmt import format_ms, parse_iso_ms, seconds_between
from ..tracker import view_record
from .api import NodeApi
from .config import DrainRule, KubernetesConfig
from .drain import NodeSteps

if TYPE_CHECKING:
    from ..imds.client import ImdsClient
    from ..outbox import Store
    from ..recording.recorder import Recorder

CONDITION = "ScheduledEvent"  # ours; Node Problem Detector's (AKS, Linux) is VMEventScheduled
KEY = "kube/"  # state database keys: kube/<EventId>/<Phase> claimed once per step record


class KubeActions:
    def __init__(
        self,
        config: KubernetesConfig,
        api: NodeApi,
        store: Store,
        clock: Clock,
        *,
        approvals_client: Callable[[], ImdsClient] | None = None,
        wake: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.api = api
        self.store = store
        self.clock = clock
        self.wake = wake or (lambda: None)
        self.log = logs.get("kubernetes")
        self.stop_event = clock.event()
        self.steps = NodeSteps(api, clock)
        self._wakes: dict[str, threading.Event] = {}  # a running drain's, set on news
        self.recorder: Recorder | None = None
        self.pool: str | None = None
        self.cluster: str | None = config.cluster or None
        self.node_uid: str | None = None
        self.on_node: Callable[[], None] | None = None  # the node's pool or cluster was read
        self._lock = threading.Lock()
        self._latest: dict[str, LifecycleRecord] = {}  # open events of this VM, as last seen
        self._lanes: dict[str, threading.Thread] = {}
        self._resume_pending = False
        self.approver: Approver | None = None
        if approvals_client is not None and any(r.approve_when_drained for r in config.drain):
            self.approver = Approver(
                approvals_client(),
                self._approved,
                still_wanted=self._may_approve,
                stop=clock.event(),
                clock=clock,
            )

    # -- identity ----------------------------------------------------------------------------

    def connect(self) -> None:
        """Read the node once (its pool, cluster, uid); the agent goes on without them."""
        try:
            node = self.api.get_node()
        except KubernetesError as exc:
            logs.event(
                self.log,
                logging.ERROR,
                "cannot read this node from the API server",
                node=self.config.node_name,
                error=str(exc),
            )
            return
        self.node_uid = node.uid
        self.pool = node.labels.get(self.config.pool_label)
        self.cluster = self.config.cluster or node.labels.get(self.config.cluster_label)
        if self.on_node is not None:
            self.on_node()
        logs.event(
            self.log,
            logging.INFO,
            "Kubernetes node",
            NodeName=node.name,
            NodePool=self.pool,
            Cluster=self.cluster,
        )

    def identity_fields(self) -> dict[str, Any]:
        return {"NodeName": self.config.node_name, "NodePool": self.pool, "Cluster": self.cluster}

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, recorder: Recorder) -> None:
        self.recorder = recorder
        if self.approver is not None:
            self.approver.start()
        self._resume_pending = not recorder.vm.VmName
        if not self._resume_pending:
            self._resume()

    def identified(self) -> None:
        if self._resume_pending and self.recorder is not None:
            self._resume_pending = False
            self._resume()

    def _resume(self) -> None:
        """Events open at start: their steps again (each skips what it finds done)."""
        assert self.recorder is not None
        state, at = self.recorder.state, self.clock.wall_ms()
        for eid in list(state.events):
            self.on_records(
                [view_record(state, eid, Phase.FIRST_SEEN, at, self.recorder.vm)], resumed=True
            )

    def stop(self) -> None:
        self.stop_event.set()
        with self._lock:
            wakes = list(self._wakes.values())
        for wake in wakes:
            wake.set()
        for lane in list(self._lanes.values()):
            lane.join(5.0)
        if self.approver is not None:
            self.approver.stop()
        self.api.close()

    # -- records in --------------------------------------------------------------------------

    def on_records(self, records: list[LifecycleRecord], *, resumed: bool = False) -> None:
        for r in records:
            if not r.AffectsThisVm or r.Phase in (Phase.APPROVED, *NODE_PHASES):
                continue
            with self._lock:  # a Removed one too: the base of the steps after it
                self._latest[r.EventId] = r
                wake = self._wakes.get(r.EventId)
            if wake is not None:  # a drain under way hears of it now, not after its backoff
                wake.set()
            if r.Phase == Phase.FIRST_SEEN:
                self._lane(r.EventId, functools.partial(self._prepare, r, resumed))
            elif r.Phase == Phase.REMOVED:
                self._lane(r.EventId, functools.partial(self._finish, r))

    def _lane(self, eid: str, work: Callable[[], None]) -> None:
        with self._lock:
            before = self._lanes.get(eid)
            lane = threading.Thread(
                target=self._step, args=(eid, before, work), name=f"node-{eid[:8]}", daemon=True
            )
            self._lanes[eid] = lane
        self.clock.track(lane)
        lane.start()

    def _step(self, eid: str, before: threading.Thread | None, work: Callable[[], None]) -> None:
        if before is not None:
            before.join()
        if self.stop_event.is_set():
            return
        try:
            work()
        except KubernetesError as exc:
            logs.event(self.log, logging.ERROR, "node step not done", EventId=eid, error=str(exc))
        except Exception as exc:  # a bug: logged with its traceback, the agent goes on
            self.log.error(
                "internal error on the node (please report it)",
                exc_info=exc,
                extra={"fields": {"EventId": eid}},
            )
        finally:
            with self._lock:
                if self._lanes.get(eid) is threading.current_thread():
                    del self._lanes[eid]

    # -- one event's steps -------------------------------------------------------------------

    def _rule(self, r: LifecycleRecord) -> DrainRule | None:
        """The rule for ``r`` on this node's pool (read again if the start could not)."""
        if self.pool is None and any(rule.node_pools for rule in self.config.drain):
            self.connect()
        return self.config.rule_for(r.EventType, r.Description, self.pool)

    def _prepare(self, r: LifecycleRecord, resumed: bool) -> None:
        rule = self._rule(r)
        eid = r.EventId
        if rule is None:
            return
        tell = self._teller()
        if not resumed:
            reason = "FreezeScheduled" if r.EventType == "Freeze" else "VMEventScheduled"
            tell(
                reason,
                f"{r.EventType} {eid} scheduled, not before {r.NotBefore or 'now'}; "
                f"policy: {rule.action}",
                False,
            )
        self._condition(
            True, r.EventType, f"{r.EventType} {eid}, not before {r.NotBefore or 'now'}"
        )
        if rule.action == "observe" or self._closed(eid):
            return
        self.steps.cordon(eid, rule, self._recorder(eid), tell)
        if rule.action != "drain" or self._closed(eid):
            return
        wake = self.clock.event()
        with self._lock:
            self._wakes[eid] = wake
        try:
            outcome = self.steps.drain(
                lambda: self._deadline(eid, rule), lambda: self._why_stop(eid), tell, wake
            )
        finally:
            with self._lock:
                self._wakes.pop(eid, None)
        record = self._recorder(eid)
        record(Phase.NODE_DRAINED if outcome.drained else Phase.NODE_DRAIN_FAILED, outcome.detail)
        if outcome.drained and rule.approve_when_drained:
            self._approve(eid)

    def _finish(self, r: LifecycleRecord) -> None:
        rule = self._rule(r)
        eid = r.EventId
        try:
            ours = self.store.load(f"{KEY}{eid}/{Phase.NODE_CORDONED}") is not None
            if rule is not None and rule.action != "observe" and rule.uncordon_after and ours:
                self.steps.uncordon(eid, self._recorder(eid), self._teller())
            if rule is not None:
                self._teller()(
                    "NoVMEventScheduled", f"{r.EventType} {eid} is over ({r.Outcome})", False
                )
                self._condition(False, "NoVMEventScheduled", f"{r.EventType} {eid} is over")
        finally:
            with self._lock:
                self._latest.pop(eid, None)

    def _closed(self, eid: str) -> bool:
        return self._why_stop(eid) is not None

    def _why_stop(self, eid: str) -> str | None:
        if self.stop_event.is_set():
            return "the agent is stopping (taken up again at its next start)"
        with self._lock:
            r = self._latest.get(eid)
        if r is None or r.Phase == Phase.REMOVED:
            return "the event has ended"
        if r.EventStatus == EventStatus.STARTED:
            return "the event has started"
        return None

    def _deadline(self, eid: str, rule: DrainRule) -> int:
        with self._lock:
            r = self._latest.get(eid)
        cap = parse_iso_ms(r.FirstSeenAt) + int(rule.max_seconds * 1000) if r else 0
        if r is None or not r.NotBefore:
            return cap
        return min(cap, parse_iso_ms(r.NotBefore) - int(rule.margin_seconds * 1000))

    # -- what it says ------------------------------------------------------------------------

    def _teller(self) -> Callable[[str, str, bool], None]:
        def tell(reason: str, message: str, warning: bool) -> None:
            try:
                self.api.event(
                    reason, message, warning=warning, uid=self.node_uid, at_ms=self.clock.wall_ms()
                )
            except KubernetesError as exc:  # an event is a courtesy: the record is the history
                logs.event(
                    self.log,
                    logging.WARNING,
                    "cannot create a Kubernetes event",
                    reason=reason,
                    error=str(exc),
                )

        return tell

    def _condition(self, open_: bool, reason: str, message: str) -> None:
        try:
            self.api.set_condition(CONDITION, open_, reason, message, self.clock.wall_ms())
        except KubernetesError as exc:
            logs.event(
                self.log,
                logging.WARNING,
                "cannot set the node's condition",
                condition=CONDITION,
                error=str(exc),
            )

    def _recorder(self, eid: str) -> Callable[[Phase, str], None]:
        def record(phase: Phase, detail: str) -> None:
            self._commit(eid, phase, detail)

        return record

    def _commit(self, eid: str, phase: Phase, detail: str) -> None:
        """The step's record, at most once per (event, phase): claimed with its row."""
        assert self.recorder is not None
        with self._lock:
            base = self._latest.get(eid)
        if base is None:
            return
        now, vm = self.clock.wall_ms(), self.recorder.vm
        rec = dataclasses.replace(
            base,
            TimeGenerated=format_ms(now) or base.TimeGenerated,
            RecordId=record_id(self.recorder.state.vm_key or vm.key, eid, phase),
            Phase=phase,
            Outcome=None,
            NoticeSeconds=None,
            StartDelaySeconds=None,
            SinceStartedSeconds=None,
            UncertaintySeconds=None,
            SinceFirstSeenSeconds=seconds_between(now, parse_iso_ms(base.FirstSeenAt)),
            vm=vm,
            NodeDetail=detail,
        )
        if not self.store.claim(
            f"{KEY}{eid}/{phase}", {"at": now}, [OutboxRow.of(rec, vm.partition_key)]
        ):
            return  # recorded before (a restart took the step up again)
        self.recorder.stats.records[(phase, rec.EventType)] += 1
        logs.event(
            self.log,
            logging.INFO,
            "record",
            Phase=phase,
            EventId=eid,
            EventType=rec.EventType,
            NodeDetail=detail,
            RecordId=rec.RecordId,
        )
        self.wake()

    # -- early approval ----------------------------------------------------------------------

    def _approve(self, eid: str) -> None:
        with self._lock:
            r = self._latest.get(eid)
        if r is None or self.approver is None or not r.NotBefore:
            return
        if len(r.Resources) != 1:  # approving would start it early on other, undrained VMs too
            logs.event(
                self.log,
                logging.INFO,
                "drained; not approved: the event names other VMs too",
                EventId=eid,
                Resources=len(r.Resources),
            )
            return
        self.approver.submit(eid, parse_iso_ms(r.NotBefore))

    def _may_approve(self, eid: str) -> bool:
        return self._why_stop(eid) is None

    def _approved(self, eid: str) -> None:
        if self.recorder is not None:
            self.recorder.approved(self.recorder.now(), [eid])
        self._teller()(
            "ScheduledEventApproved", f"{eid} approved early: the node is drained", False
        )
