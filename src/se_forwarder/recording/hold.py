"""Records held until the VM's identity is known.

Without the instance document a record could only guess: VmId null, the host name as VmName
(on a scale set the computer name is not the VM's name) and AffectsThisVm false although the
event names this VM. No record may claim the wrong VM or a wrong AffectsThisVm, so while the
instance document has not answered, the records the tracker makes are
committed with the tracker state as usual, but kept in the state database (``held|<n>`` keys,
durable and in order) instead of the outbox, and nothing hears of them yet. When the document
answers they get this VM's identity columns, AffectsThisVm from its name and ``IdentityKnown``
true, and move to the outbox in one transaction; then they are handed on (sinks, policy). If it
has not answered within ``HOLD_SECONDS`` of the first held record (or the agent stops) they go
as they are: ``IdentityKnown`` false, VmId null, VmName ``agent.vm_name`` or null, AffectsThisVm
null unless the VM's name is known; later records then go at once. Released with the identity,
they are given the RecordIds the VmId makes, the ones a restart with the identity known at once
would make for the same facts; released without it, they keep the ones the tracker made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..clock import Clock
from ..model import IDENTITY_FIELDS, LifecycleRecord, VmIdentity, record_id
from ..outbox import OutboxRow, Store

# Long enough for a refused or restarting IMDS to answer (the instance document is asked for at
# every poll meanwhile), short enough to leave most of a Spot eviction's 30 s notice.
HOLD_SECONDS = 15.0
PREFIX = "held|"


class Hold:
    def __init__(self, store: Store, clock: Clock, seconds: float) -> None:
        """``seconds`` 0: never hold (replay: its identity is the one it is given)."""
        self.clock, self.seconds = clock, seconds
        self.on_hold: Callable[[], None] | None = None  # the first record held: ask IMDS now
        self._held = dict(sorted(store.scan(PREFIX).items())) if seconds > 0 else {}
        self._ids = {d.get("RecordId") for d in self._held.values()}
        self._n = max((int(k[len(PREFIX) :]) for k in self._held), default=0)
        self._since: float | None = clock.monotonic() if self._held else None
        self._gave_up = False  # the bound passed once: later records go at once

    @property
    def waiting(self) -> bool:
        """Records are held for the identity."""
        return bool(self._held)

    def active(self, vm: VmIdentity) -> bool:
        """Whether new records are to be held (and they are while earlier ones are: in order)."""
        return bool(self._held) or (self.seconds > 0 and not vm.IdentityKnown and not self._gave_up)

    def keep(self, records: Sequence[LifecycleRecord]) -> dict[str, Any]:
        """The entries to commit (with the tracker state) instead of outbox rows."""
        out = {}
        for r in records:
            self._n += 1
            out[f"{PREFIX}{self._n:012d}"] = r.as_dict()
        return out

    def kept(self, entries: dict[str, Any]) -> None:
        """``entries`` were committed."""
        first = not self._held
        self._held.update(entries)
        self._ids |= {d["RecordId"] for d in entries.values()}
        if first:
            self._since = self.clock.monotonic()
            if self.on_hold is not None:
                self.on_hold()

    def waited(self) -> float:
        """Seconds since the first record now held was held (0 when none is)."""
        return 0.0 if self._since is None else self.clock.monotonic() - self._since

    def holds(self, record: LifecycleRecord) -> bool:
        return record.RecordId in self._ids

    def due(self, vm: VmIdentity) -> bool:
        """Held records can go: the identity is known, or the bound has passed."""
        if not self._held:
            return False
        return vm.IdentityKnown or (
            self._since is not None and self.clock.monotonic() - self._since >= self.seconds
        )

    def release(self, vm: VmIdentity) -> tuple[list[LifecycleRecord], list[OutboxRow], list[str]]:
        """The held records with ``vm``'s identity, their outbox rows and the keys to forget."""
        records = [with_identity(d, vm) for d in self._held.values()]
        return records, [OutboxRow.of(r, vm.partition_key) for r in records], list(self._held)

    def released(self, vm: VmIdentity) -> None:
        """The release was committed."""
        self._held.clear()
        self._ids.clear()
        self._since = None
        self._gave_up = self._gave_up or not vm.IdentityKnown


def with_identity(record: dict[str, Any], vm: VmIdentity) -> LifecycleRecord:
    """A held record (its contract columns) with ``vm``'s identity columns and AffectsThisVm."""
    values = {k: v for k, v in record.items() if k not in IDENTITY_FIELDS}
    values["AffectsThisVm"] = vm.affects(tuple(values.get("Resources") or ()))
    if vm.IdentityKnown:  # the id a restart with the identity known would make
        values["RecordId"] = record_id(
            vm.key, values["EventId"], values["Phase"], values["DocumentIncarnation"]
        )
    return LifecycleRecord(**values, vm=vm)
