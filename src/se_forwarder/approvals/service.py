"""Early approval across a service: who may be in impact at once (pure; docs/policy.md,
"Early approval across a service").

The service's shared state is one document, ``Slots``: the VMs approved early and not yet back
(``holders``), each with its event, zone and fault domain, and when its claim may be reclaimed.
``admit`` decides one VM's request against it: at most ``limit`` holders, all in one zone (or
fault domain), expired claims dropped, the VM's own claim found again after a restart. The
coordinator (``coordinator.py``) reads the document, calls ``admit`` and writes the result back
only if nobody wrote in between, so every admission is one atomic step. No agent's clock is
used: ``now_ms`` is storage's, the expiries are computed on it and on Azure's NotBefore.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

Spread = Literal["zone", "fault-domain", "none"]


@dataclass(frozen=True, slots=True)
class Holder:
    vm: str  # the VM's name (VmId where the name is ambiguous: the key below)
    event_id: str
    zone: str
    fault_domain: int | None
    expires_ms: int  # storage's clock: after it the claim may be reclaimed


@dataclass(frozen=True, slots=True)
class Slots:
    holders: dict[str, Holder] = field(default_factory=dict)  # key: "<VmId>|<EventId>"

    def to_json(self) -> str:
        return json.dumps({"v": 1, "holders": {k: asdict(h) for k, h in self.holders.items()}})

    @classmethod
    def from_json(cls, text: str | bytes) -> Slots:
        data: Any = json.loads(text or "{}")
        raw = data.get("holders", {}) if isinstance(data, dict) else {}
        return cls({str(k): Holder(**v) for k, v in raw.items() if isinstance(v, dict)})


@dataclass(frozen=True, slots=True)
class Request:
    key: str  # "<VmId>|<EventId>": the same VM and event find their claim again
    vm: str
    event_id: str
    zone: str
    fault_domain: int | None
    not_before_ms: int


@dataclass(frozen=True, slots=True)
class Admission:
    admitted: bool
    slots: Slots  # the document to write (unchanged when nothing changes)
    why: str  # in words, for the log and what the event got


def _side(h: Holder | Request, spread: Spread) -> str | int | None:
    if spread == "zone":
        return h.zone
    if spread == "fault-domain":
        return h.fault_domain
    return None


def admit(
    slots: Slots, req: Request, *, now_ms: int, limit: int, spread: Spread, bound_ms: int
) -> Admission:
    """Whether ``req`` may be approved early now, and the document that says so."""
    live = {k: h for k, h in slots.holders.items() if h.expires_ms >= now_ms}
    dropped = len(slots.holders) - len(live)
    if req.key in live:
        return Admission(True, replace(slots, holders=live), "already admitted (its claim stands)")
    if len(live) >= limit:
        return Admission(False, replace(slots, holders=live), f"{len(live)} of {limit} in impact")
    sides = {_side(h, spread) for h in live.values()}
    mine = _side(req, spread)
    if spread != "none" and sides and sides != {mine}:
        where = "zone" if spread == "zone" else "fault domain"
        return Admission(
            False,
            replace(slots, holders=live),
            f"{len(live)} in impact in another {where} "
            f"({', '.join(map(str, sorted(sides, key=str)))})",
        )
    holder = Holder(
        req.vm,
        req.event_id,
        req.zone,
        req.fault_domain,
        max(now_ms, req.not_before_ms) + bound_ms,
    )
    why = f"slot {len(live) + 1} of {limit}" + (
        f" ({dropped} expired claim(s) reclaimed)" if dropped else ""
    )
    return Admission(True, Slots({**live, req.key: holder}), why)


def release(slots: Slots, key: str) -> Slots:
    return Slots({k: h for k, h in slots.holders.items() if k != key})
