"""One play: the stand up, the chaos (a ``Plan``, or none) and the observer beside it until every
VM's event is over and its records delivered, then the judgement, and the figures a person reads:
when the service's maintenance was over, against NotBefore."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from se_forwarder.model import Phase

from .chaos import Driver, Plan
from .observer import Judgement, Observer, judge, records
from .stand import Shape, Stand


@dataclass
class Result:
    shape: Shape
    plan: Plan | None
    judgement: Judgement
    t0: float
    agent_starts: int
    store_kills: int

    def scenario(self, real: float | None) -> float | None:
        return None if real is None else (real - self.t0) * self.shape.speed

    @property
    def last_back(self) -> float:
        """Scenario seconds from the announcement until the last VM was back."""
        ends = [self.scenario(w.end) for w in self.judgement.windows]
        return max((e for e in ends if e is not None), default=float("nan"))

    def lines(self) -> list[str]:
        out = [*(self.plan.lines() if self.plan else ["no chaos"])]
        out.append(f"{'vm':<8}{'zone':<6}{'approved':>10}{'started':>10}{'ended':>10}  decision")
        for w in self.judgement.windows:
            cells = [self.scenario(x) for x in (w.approved, w.start, w.end)]
            text = "  ".join(f"{c:>8.0f}" if c is not None else f"{'-':>8}" for c in cells)
            out.append(f"web-{w.vm:<4}{w.zone:<6}{text}  {self.judgement.decisions.get(w.vm, '')}")
        v = self.judgement
        out.append(
            f"most in impact before NotBefore: {v.most} in {v.zones} zone(s); "
            f"agents started {self.agent_starts} times, store killed {self.store_kills} times"
        )
        out += [f"PROBLEM: {p}" for p in self.judgement.problems] or ["invariants held"]
        return out


def play(
    root: Path,
    shape: Shape,
    plan: Plan | None = None,
    timeout: float = 180.0,
    expect: Shape | None = None,
) -> Result:
    """Run the service's maintenance once (``plan``: its faults, and its skewed VM), judged
    against the policy ``expect`` says (the shape's own by default)."""
    if plan is not None:
        shape = plan.shape
    with Stand(root, shape) as stand:
        observer = Observer(stand, expect or shape)
        driver = Driver(stand, plan.faults if plan else ())
        observer.start()
        driver.start()
        deadline = time.monotonic() + timeout
        horizon = stand.t0 + shape.real(shape.notice + shape.impact) + 1
        while time.monotonic() < deadline and not (time.time() > horizon and observer.over()):
            time.sleep(0.2)
        driver.stop()
        driver.join(30)
        observer.stop()
        while time.monotonic() < deadline and not _delivered(stand):
            time.sleep(0.2)
        judgement = judge(stand, driver.outages, observer.seen, expect or shape)
        judgement.problems += driver.errors
        starts = sum(vm.starts for vm in stand.vms)
        return Result(shape, plan, judgement, stand.t0, starts, stand.store_kills)


def _delivered(stand: Stand) -> bool:
    return all(any(r["Phase"] == Phase.REMOVED for r in records(vm)) for vm in stand.vms)
