"""The chaos, planned from a seed and played on real time: kill -9 of agents (each started again
``down`` seconds later, as systemd's ``Restart=always`` would), a crash of the store (every
connection cut at once, Azurite down, then started again on the same data directory:
``Stand.kill_store`` says why it is not a SIGKILL), a partition between one agent and the
store, and one VM whose clock is off (``Shape.skewed``). ``Outages`` keeps when each thing was
down, in real epoch seconds, for the observer.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field, replace

from .stand import Shape, Stand

AGENT, STORE, PARTITION = "kill -9 agent", "store crash", "partition"
ADMITTED = "kill -9 agent at its admission"  # the moment its claim is written, approval due


@dataclass(frozen=True)
class Fault:
    at: float  # real seconds after the scenario's start
    kind: str
    target: int | None  # the VM (None: the store)
    down: float  # real seconds until it is back

    def __str__(self) -> str:
        who = "store" if self.target is None else f"vm {self.target}"
        return f"{self.at:6.2f}s {self.kind:<14} {who:<6} for {self.down:.2f}s"


@dataclass(frozen=True)
class Plan:
    seed: int
    shape: Shape
    faults: tuple[Fault, ...]

    def lines(self) -> list[str]:
        s = self.shape
        head = f"chaos seed {self.seed}: {len(self.faults)} faults"
        if s.skewed is not None:
            head += f"; vm {s.skewed}'s clock is {s.skew:+.1f}s off Azure's"
        return [head, *(f"  {f}" for f in self.faults)]


def plan(seed: int, shape: Shape, agent_kills: int = 6, store_kills: int = 2) -> Plan:
    """Faults at random moments between the announcement and the last possible end of impact
    (NotBefore plus one impact), never two at once on one target."""
    rng = random.Random(seed)
    horizon = shape.real(shape.notice + shape.impact)
    claimer = rng.randrange(shape.vms)  # killed the moment it is admitted
    faults: list[Fault] = [Fault(0.0, ADMITTED, claimer, round(rng.uniform(0.3, 2.0), 2))]
    others = [i for i in range(shape.vms) if i != claimer]

    def place(kind: str, target: int | None, low: float, high: float) -> None:
        for _ in range(50):
            f = Fault(
                round(rng.uniform(0.5, horizon), 2), kind, target, round(rng.uniform(low, high), 2)
            )
            if not any(_overlap(f, g) for g in faults):
                faults.append(f)
                return

    for _ in range(agent_kills):
        place(AGENT, rng.choice(others), 0.3, 2.0)
    for _ in range(store_kills):
        place(STORE, None, 0.5, 3.0)
    place(PARTITION, rng.randrange(shape.vms), horizon / 8, horizon / 3)
    skewed = rng.randrange(shape.vms)
    skew = round(rng.choice((-1, 1)) * rng.uniform(0.1, 0.25) * shape.real(shape.notice), 1)
    shape = replace(shape, skewed=skewed, skew=skew)
    return Plan(seed, shape, tuple(sorted(faults, key=lambda f: f.at)))


def _overlap(a: Fault, b: Fault) -> bool:
    same = (a.kind == STORE and b.kind == STORE) or (a.target is not None and a.target == b.target)
    return same and a.at < b.at + b.down + 0.5 and b.at < a.at + a.down + 0.5


@dataclass
class Outages:
    """When each thing was down (real epoch seconds): the observer's view of the chaos."""

    store: list[tuple[float, float]] = field(default_factory=list)
    agents: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    partitions: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    #: vm -> when its agent said it was admitted (its claim in the store) and was killed for it
    admitted: dict[int, float] = field(default_factory=dict)


class Driver(threading.Thread):
    def __init__(self, stand: Stand, faults: tuple[Fault, ...]) -> None:
        super().__init__(name="chaos", daemon=True)
        self.stand, self.faults, self.outages = stand, faults, Outages()
        self._halt = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        timed = [f for f in self.faults if f.kind != ADMITTED]
        for f in self.faults:
            if f.kind == ADMITTED:
                threading.Thread(target=self._at_admission, args=(f,), daemon=True).start()
        jobs = sorted(
            [(f.at, 0, f) for f in timed] + [(f.at + f.down, 1, f) for f in timed],
            key=lambda j: (j[0], j[1]),
        )
        began: dict[Fault, float] = {}
        for at, back, f in jobs:
            stopping = self._halt.wait(max(0.0, self.stand.t0 + at - time.time()))
            if stopping and f not in began:
                continue  # stopping: bring back what is down, start nothing new
            try:
                if back or stopping:
                    self._up(f, began[f])
                else:
                    began[f] = time.time()
                    self._down(f)
            except Exception as exc:  # the stand could not do it: the run is judged unfit
                self.errors.append(f"{f}: {type(exc).__name__}: {exc}")

    def _at_admission(self, f: Fault) -> None:
        """kill -9 the agent as soon as it says it was admitted (its claim is in the store, its
        approval about to be sent, or just sent), then start it again."""
        vm = self.stand.vms[f.target or 0]
        while not self._halt.wait(0.002):
            agent = vm.agent
            said = agent.messages("service approval") if agent is not None else []
            if any(str(ln.get("decision", "")).startswith("admitted") for ln in said):
                since = time.time()
                self.outages.admitted[vm.index] = since
                self.stand.kill_agent(vm)
                self._halt.wait(f.down)
                self.stand.start_agent(vm)
                self.outages.agents.setdefault(vm.index, []).append((since, time.time()))
                return

    def _down(self, f: Fault) -> None:
        if f.kind == STORE:
            self.stand.kill_store()
        elif f.kind == AGENT:
            self.stand.kill_agent(self.stand.vms[f.target or 0])
        else:
            self.stand.partition(self.stand.vms[f.target or 0], True)

    def _up(self, f: Fault, since: float) -> None:
        if f.kind == STORE:
            self.stand.start_store()
            self.outages.store.append((since, time.time()))
        elif f.kind == AGENT:
            self.stand.start_agent(self.stand.vms[f.target or 0])
            self.outages.agents.setdefault(f.target or 0, []).append((since, time.time()))
        else:
            self.stand.partition(self.stand.vms[f.target or 0], False)
            self.outages.partitions.setdefault(f.target or 0, []).append((since, time.time()))

    def stop(self) -> None:
        self._halt.set()
