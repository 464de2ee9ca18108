"""One event's steps on the node: cordon, drain, uncordon. Each step can be run again after a
restart without doing twice what it did: the node itself remembers what this agent did (its
annotations, written in the same patch as the change, as kured keeps the node's previous
state in its lock annotation), and each step's record is committed at most once (``record``).

A cordon or a label someone else made (AKS's remediator, a person, another tool) is never
undone: it is recorded (``NodeCordonSkipped``) and left as it is.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import logs
from ..backoff import EVICTION
from ..clock import Clock
from ..errors import KubernetesError
from ..model import Phase
from .api import NodeApi, NodeView, PodView
from .config import DrainRule

ANN_CORDONED = "se-forwarder.io/cordoned-for"  # EventId: this agent cordoned the node for it
ANN_EXCLUDED = "se-forwarder.io/excluded-for"  # EventId: this agent set the LB label for it
LB_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
REMEDIATOR_TAINT = "remediator.kubernetes.azure.com/unschedulable"  # AKS's node auto-drain
CONFLICT_TRIES = 5  # reads and patches of the node when it keeps changing under us (409)
TERMINATING_POLL = 2.0  # seconds between looks at pods that were evicted and still terminate

Record = Callable[[Phase, str], None]  # a step's record, committed at most once per event
Tell = Callable[[str, str, bool], None]  # a Kubernetes event: reason, message, warning


@dataclass
class DrainOutcome:
    drained: bool
    detail: str


class NodeSteps:
    def __init__(self, api: NodeApi, clock: Clock) -> None:
        self.api = api
        self.clock = clock
        self.log = logs.get("kubernetes")

    # -- cordon ------------------------------------------------------------------------------

    def cordon(self, eid: str, rule: DrainRule, record: Record, tell: Tell) -> bool:
        """Cordon for ``eid`` unless the node is cordoned already; True if the cordon is ours."""
        for _ in range(CONFLICT_TRIES):
            node = self.api.get_node()
            if node.annotations.get(ANN_CORDONED) == eid:  # done before a restart
                record(Phase.NODE_CORDONED, _cordon_words(node, rule, resumed=True))
                return True
            if node.unschedulable:
                who = _who_cordoned(node)
                tell("NodeAlreadyCordoned", f"already cordoned by {who}: left as it is", False)
                record(
                    Phase.NODE_CORDON_SKIPPED,
                    f"already cordoned by {who}; not cordoned, and not uncordoned after the event",
                )
                return False
            patch: dict[str, Any] = {
                "metadata": {"annotations": {ANN_CORDONED: eid}},
                "spec": {"unschedulable": True},
            }
            if rule.exclude_from_load_balancers and LB_LABEL not in node.labels:
                patch["metadata"]["labels"] = {LB_LABEL: "true"}
                patch["metadata"]["annotations"][ANN_EXCLUDED] = eid
            tell("NodeCordonStart", f"cordoning the node for scheduled event {eid}", False)
            try:
                done = self.api.patch_node(patch, node.resource_version)
            except KubernetesError as exc:
                if exc.status == 409:  # changed since we read it: read again
                    continue
                raise
            tell("NodeCordonEnd", "node cordoned", False)
            record(Phase.NODE_CORDONED, _cordon_words(done, rule, resumed=False))
            return True
        raise KubernetesError(
            f"the node kept changing: not cordoned after {CONFLICT_TRIES} tries", 409
        )

    # -- drain -------------------------------------------------------------------------------

    def drain(
        self,
        deadline_ms: Callable[[], int],
        still_wanted: Callable[[], str | None],
        tell: Tell,
        wake: threading.Event,
    ) -> DrainOutcome:
        """Evict every pod that may be evicted until none is left, the deadline passes or
        ``still_wanted`` says why not (the event started, ended, the agent stops); ``wake`` is
        set when that may have changed (a new record of the event, a stop)."""
        tell("NodeDrainStart", "evicting the node's pods (not DaemonSet or mirror pods)", False)
        started = self.clock.monotonic()
        evicted: set[str] = set()
        refused: Counter[str] = Counter()
        attempt = 0
        while True:
            try:
                left = [p for p in self.api.pods() if p.evictable]
            except KubernetesError as exc:
                left, error = None, str(exc)
            if left == []:
                words = _drain_words(len(evicted), refused, self.clock.monotonic() - started)
                tell("NodeDrainEnd", words, False)
                return DrainOutcome(True, words)
            why = still_wanted()
            if why is None and self.clock.wall_ms() >= deadline_ms():
                why = "the deadline (NotBefore less the rule's margin) passed"
            if why is not None:
                names = ", ".join(p.key for p in left[:10]) if left else f"unknown ({error})"
                words = f"{why}; pods left: {names}; " + _drain_words(
                    len(evicted), refused, self.clock.monotonic() - started
                )
                tell("NodeDrainError", words, True)
                return DrainOutcome(False, words)
            blocked = self._evict_all(left or [], evicted, refused, tell) or left is None
            attempt = attempt + 1 if blocked else 0
            pause = EVICTION.delay(attempt) + 0.5 if blocked else TERMINATING_POLL
            pause = min(pause, max(0.1, (deadline_ms() - self.clock.wall_ms()) / 1000))
            if self.clock.wait(wake, pause):
                wake.clear()  # news about the event: still_wanted says what at the next turn

    def _evict_all(
        self, pods: list[PodView], evicted: set[str], refused: Counter[str], tell: Tell
    ) -> bool:
        """One eviction request per pod not yet evicted; True if any was refused."""
        blocked = False
        for pod in pods:
            if pod.key in evicted:
                continue  # terminating
            try:
                code = self.api.evict(pod)
            except KubernetesError as exc:
                code, why = None, str(exc)
            else:
                why = "a PodDisruptionBudget does not allow it now"
            if code in (201, 404):
                evicted.add(pod.key)
                if code == 201:
                    tell("Evicted", f"evicted pod {pod.key}", False)
                continue
            blocked = True
            refused[pod.key] += 1
            if refused[pod.key] == 1:  # said once per pod, retried quietly with backoff
                tell("FailedToEvict", f"cannot evict pod {pod.key} yet: {why}; retrying", True)
                logs.event(
                    self.log, logging.INFO, "eviction refused; retrying", pod=pod.key, why=why
                )
        return blocked

    # -- uncordon ----------------------------------------------------------------------------

    def uncordon(self, eid: str, record: Record, tell: Tell) -> None:
        """Undo what this agent did for ``eid`` (its annotations say what), nothing else."""
        for _ in range(CONFLICT_TRIES):
            node = self.api.get_node()
            patch: dict[str, Any] = {"metadata": {"annotations": {}, "labels": {}}, "spec": {}}
            left = ""
            if node.annotations.get(ANN_CORDONED) == eid:
                patch["metadata"]["annotations"][ANN_CORDONED] = None
                if REMEDIATOR_TAINT in node.taints:  # AKS's auto-drain has it now: its to undo
                    left = "; left cordoned: AKS's remediator cordoned it too (its taint is on)"
                else:
                    patch["spec"]["unschedulable"] = False
            if node.annotations.get(ANN_EXCLUDED) == eid:
                patch["metadata"]["annotations"][ANN_EXCLUDED] = None
                patch["metadata"]["labels"][LB_LABEL] = None
            if not patch["metadata"]["annotations"]:
                record(
                    Phase.NODE_UNCORDONED,
                    "nothing to undo: the cordon was already lifted by someone else",
                )
                return
            tell("NodeUncordonStart", f"undoing the cordon made for scheduled event {eid}", False)
            try:
                self.api.patch_node(patch, node.resource_version)
            except KubernetesError as exc:
                if exc.status == 409:
                    continue
                raise
            words = "uncordoned" if "unschedulable" in patch["spec"] else "cordon kept"
            if patch["metadata"]["labels"]:
                words += "; back in external load balancers"
            tell("NodeUncordonEnd", words + left, False)
            record(Phase.NODE_UNCORDONED, words + left)
            return
        raise KubernetesError(
            f"the node kept changing: not uncordoned after {CONFLICT_TRIES} tries", 409
        )


def _who_cordoned(node: NodeView) -> str:
    if REMEDIATOR_TAINT in node.taints:
        return f"AKS's remediator (taint {REMEDIATOR_TAINT})"
    if ANN_CORDONED in node.annotations:
        return f"this agent for another event ({node.annotations[ANN_CORDONED]})"
    return "someone else (spec.unschedulable was already true)"


def _cordon_words(node: NodeView, rule: DrainRule, *, resumed: bool) -> str:
    words = "cordoned by this agent"
    if rule.exclude_from_load_balancers:
        words += "; out of external load balancers" if LB_LABEL in node.labels else ""
    if REMEDIATOR_TAINT in node.taints:
        words += f"; AKS's remediator taint {REMEDIATOR_TAINT} is on too"
    return words + (" (found so after a restart)" if resumed else "")


def _drain_words(evicted: int, refused: Counter[str], seconds: float) -> str:
    words = f"{evicted} pod(s) evicted in {seconds:.0f} s"
    if refused:
        words += (
            f"; {sum(refused.values())} eviction(s) refused by a budget or the API server, of "
            + ", ".join(sorted(refused))
        )
    return words
