"""Work beside polling, each on a schedule of its own (status.json, heartbeats, checkpoints, the
metrics textfile, the instance document): run from the poll loop's thread between polls, so the
agent is one thread plus one per sink."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(slots=True)
class Chore:
    """``run`` is called when due; it may return the seconds until it is due again (the instance
    document's retry schedule), else it is due again ``every`` seconds later."""

    name: str  # for the log and tests
    run: Callable[[], float | None]
    every: float
    first_in: float = 0.0  # seconds after the loop starts: 0 runs it at the first poll
    due: float = 0.0  # monotonic; set by ``Chores``

    def soon(self) -> None:
        """Run it after the poll now going on (the next ``run_due``)."""
        self.due = 0.0


class Chores:
    def __init__(self, chores: Sequence[Chore]) -> None:
        self.chores = list(chores)

    def start(self, now: float) -> None:
        for c in self.chores:
            c.due = now + c.first_in

    def run_due(self, now: float) -> None:
        for c in self.chores:
            if now >= c.due:
                again = c.run()
                c.due = now + (c.every if again is None else again)
