"""Declarative scenarios for the IMDS simulator: TOML files validated strictly, and the pure
timeline that says which events are visible, in which state, at a given scenario time.

Times in a scenario are *scenario seconds* from the simulator's start; the simulator divides them
by its speed. The timeline is a pure function of (time, approvals) so it can be tested without a
clock and so the server can compute the exact moment of the next change.
"""

from __future__ import annotations

import os
import tomllib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from se_forwarder.errors import ScenarioError

#: The placeholder in ``resources`` that stands for the simulated VM's own name.
THIS_VM = "$vm"

FAULT_KINDS = (
    "410",
    "429",
    "500",
    "503",
    "empty",
    "garbage",
    "wrong_shape",
    "drop",
    "hang",
    "slow",
)

NonNegative = Annotated[float, Field(ge=0)]

_VM_ID_NAMESPACE = uuid.UUID("3b0c6f4e-2d8a-4c1e-9f57-0a6d5e4b3c21")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Reschedule(_Strict):
    """At scenario time ``at`` the still-Scheduled event gets a new NotBefore (and maybe more)."""

    at: NonNegative
    not_before: NonNegative
    start: NonNegative | None = None
    duration: int | None = Field(default=None, ge=-1)
    description: str | None = None

    @model_validator(mode="after")
    def _order(self) -> Reschedule:
        if self.not_before <= self.at:  # else it would start unannounced, breaking NotBefore
            raise ValueError("not_before must be later than at")
        if self.start is not None and self.start < self.not_before:
            raise ValueError("start must not be earlier than not_before")
        return self


class EventSpec(_Strict):
    """One scheduled event's life: when it appears, its NotBefore, when it starts and goes."""

    id: str | None = None
    type: Literal["Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"]
    resources: list[str] = Field(min_length=1)
    resource_type: str = "VirtualMachine"
    source: Literal["Platform", "User"] = "Platform"
    description: str = ""
    duration: int = Field(default=-1, ge=-1)
    appear: NonNegative = 0.0
    #: Appears already Started (hardware failure): no NotBefore, no Scheduled phase.
    started: bool = False
    not_before: NonNegative | None = None
    #: When it starts by itself; defaults to NotBefore (events never start before it).
    start: NonNegative | None = None
    #: An approval POST makes it start this many scenario seconds later (if that is earlier)...
    approval_delay: NonNegative = 0.0
    #: ...unless this is false: the approval is acknowledged (200) but changes nothing.
    start_on_approval: bool = True
    #: Absolute removal time; if it comes before the start, the event was cancelled.
    remove: NonNegative | None = None
    #: Removal relative to the actual start (which an approval may move earlier).
    remove_after_start: NonNegative | None = None
    reschedule: list[Reschedule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> EventSpec:
        if self.started:
            for key in ("not_before", "start"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key} is not allowed with started = true")
            if self.reschedule:
                raise ValueError("reschedule is not allowed with started = true")
        else:
            if self.not_before is None:
                raise ValueError("not_before is required unless started = true")
            if self.not_before < self.appear:
                raise ValueError("not_before must not be earlier than appear")
            if self.start is not None and self.start < self.not_before:
                raise ValueError("start must not be earlier than not_before")
        if self.remove is not None and self.remove <= self.appear:
            raise ValueError("remove must be later than appear")
        last = self.appear
        for r in self.reschedule:
            if r.at <= last:
                raise ValueError("reschedule times must be later than appear and increasing")
            last = r.at
        return self


class VmSpec(_Strict):
    """The instance document's identity of the simulated VM."""

    name: str = "sim-vm"
    #: Set by the scenario, or None: then ``vm_id`` is derived from the name, so two simulated
    #: VMs never share a vmId (their records would collapse into one VM in the fleet view).
    explicit_vm_id: str | None = Field(default=None, alias="vm_id")
    subscription_id: str = "00000000-0000-0000-0000-000000000000"
    resource_group: str = "rg-sim"
    location: str = "westeurope"
    zone: str = ""
    scale_set: str = ""
    fault_domain: int = Field(default=0, ge=0)
    update_domain: int = Field(default=0, ge=0)
    vm_size: str = "Standard_D2s_v5"
    os_type: Literal["Linux", "Windows"] = "Linux"
    private_ip: str = "10.0.0.4"
    tags: dict[str, str] = Field(default_factory=dict)

    @property
    def vm_id(self) -> str:
        """The VM's vmId: the scenario's, else a UUID derived from the name (deterministic)."""
        return self.explicit_vm_id or str(uuid.uuid5(_VM_ID_NAMESPACE, self.name))

    @property
    def resource_id(self) -> str:
        """The ARM id, as IMDS gives it (scale-set instances live under the scale set)."""
        base = (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}/providers"
        )
        if self.scale_set:
            instance = self.name.rsplit("_", 1)[-1]
            return (
                f"{base}/Microsoft.Compute/virtualMachineScaleSets/{self.scale_set}"
                f"/virtualMachines/{instance}"
            )
        return f"{base}/Microsoft.Compute/virtualMachines/{self.name}"


class IdentitySpec(_Strict):
    """A user-assigned managed identity the token endpoint knows."""

    client_id: str
    object_id: str
    resource_id: str


class FaultSpec(_Strict):
    """A fault queued at scenario time ``at`` for the next ``count`` scheduledevents GETs."""

    at: NonNegative = 0.0
    kind: Literal[
        "410", "429", "500", "503", "empty", "garbage", "wrong_shape", "drop", "hang", "slow"
    ]
    count: int = Field(default=1, ge=1)
    #: For ``slow`` and ``hang``: real seconds to wait.
    delay: NonNegative = 0.0


class Scenario(_Strict):
    name: str = "scenario"
    description: str = ""
    #: Default speed (scenario seconds per real second); the caller may override it.
    speed: float = Field(default=1.0, gt=0)
    #: The first scheduledevents answer waits this long (scenario seconds); real IMDS: up to 120 s.
    first_call_delay: NonNegative = 0.0
    #: Incarnation of the first document (the empty one).
    incarnation: int = 1
    system_identity: bool = True
    vm: VmSpec = Field(default_factory=VmSpec)
    identities: list[IdentitySpec] = Field(default_factory=list)
    events: list[EventSpec] = Field(default_factory=list)
    faults: list[FaultSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_ids(self) -> Scenario:
        ids = [e.id.lower() for e in self.events if e.id]
        if len(ids) != len(set(ids)):
            raise ValueError("event ids must be unique")
        return self

    @property
    def end(self) -> float:
        """Scenario time of the last scripted change (without approvals)."""
        times = [0.0]
        for e in self.events:
            tl = Timeline(e, "x", "")
            times.extend(tl.change_times({}))
        times.extend(f.at for f in self.faults)
        return max(times)


def _format_errors(source: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in err["loc"])
        loc = loc.replace(".[", "[")
        parts.append(f"{loc or '(top level)'}: {err['msg']}")
    return f"{source}: " + "; ".join(parts)


def parse_scenario(data: Mapping[str, Any], source: str = "<scenario>") -> Scenario:
    """Validate a scenario mapping; errors name ``source`` and the offending key."""
    try:
        return Scenario.model_validate(dict(data))
    except ValidationError as exc:
        raise ScenarioError(_format_errors(source, exc)) from None


def builtin_names() -> list[str]:
    """Names of the scenarios shipped in the package."""
    folder = importlib_resources.files(__package__).joinpath("scenarios")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a built-in scenario by name (``demo``) or a TOML file by path."""
    text: str
    source = str(name_or_path)
    path = Path(name_or_path)
    # A bare name is a built-in scenario, whatever the current directory holds (``demo`` must
    # not pick up a folder called demo); anything that looks like a path is a file.
    looks_like_path = path.suffix == ".toml" or "/" in source or os.sep in source
    if not looks_like_path and source in builtin_names():
        res = importlib_resources.files(__package__).joinpath("scenarios", f"{source}.toml")
        text = res.read_text(encoding="utf-8")
        source = f"{source} (built-in)"
    elif looks_like_path or path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ScenarioError(f"{source}: cannot read: {exc.strerror or exc}") from None
    else:
        raise ScenarioError(
            f"{source}: no such scenario file or built-in scenario "
            f"(built-in: {', '.join(builtin_names())})"
        )
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{source}: not valid TOML: {exc}") from None
    data.setdefault("name", path.stem)
    return parse_scenario(data, source)


# ---------------------------------------------------------------------------------------------
# The timeline


@dataclass(frozen=True)
class EventState:
    """An event as it is at one instant (NotBefore in scenario seconds; None once Started)."""

    event_id: str
    event_type: str
    status: str
    resources: tuple[str, ...]
    resource_type: str
    not_before: float | None
    description: str
    source: str
    duration: int


@dataclass(frozen=True)
class _Version:
    since: float
    not_before: float
    start: float
    duration: int
    description: str


class Timeline:
    """One event's life as a pure function of time and its approval time."""

    def __init__(self, spec: EventSpec, event_id: str, vm_name: str) -> None:
        self.spec = spec
        self.event_id = event_id
        self.resources = tuple(vm_name if r == THIS_VM else r for r in spec.resources)
        self.versions: list[_Version] = []
        if not spec.started:
            assert spec.not_before is not None
            nb = spec.not_before
            start = spec.start if spec.start is not None else nb
            self.versions.append(_Version(spec.appear, nb, start, spec.duration, spec.description))
            prev = self.versions[0]
            for r in spec.reschedule:
                prev = _Version(
                    r.at,
                    r.not_before,
                    r.start if r.start is not None else r.not_before,
                    r.duration if r.duration is not None else prev.duration,
                    r.description if r.description is not None else prev.description,
                )
                self.versions.append(prev)

    def start_time(self, approved_at: float | None) -> float:
        """When it starts: its planned start under the schedule in force, or after approval."""
        spec = self.spec
        if spec.started:
            return spec.appear
        planned = float("inf")
        for i, v in enumerate(self.versions):
            until = self.versions[i + 1].since if i + 1 < len(self.versions) else float("inf")
            at = max(v.start, v.since)
            if at < until:
                planned = at
                break
        if approved_at is not None and spec.start_on_approval:
            planned = min(planned, max(approved_at, spec.appear) + spec.approval_delay)
        return planned

    def remove_time(self, start: float) -> float:
        spec = self.spec
        removal = spec.remove if spec.remove is not None else float("inf")
        if spec.remove_after_start is not None and start < removal:
            removal = min(removal, start + spec.remove_after_start)
        return removal

    def state_at(self, t: float, approved_at: float | None) -> EventState | None:
        spec = self.spec
        if t < spec.appear:
            return None
        start = self.start_time(approved_at)
        if t >= self.remove_time(start):
            return None
        started = t >= start
        version = None
        for v in self.versions:  # a re-schedule due after the start no longer applies
            if v.since <= t and (v.since < start or v is self.versions[0]):
                version = v
        duration = version.duration if version else spec.duration
        description = version.description if version else spec.description
        return EventState(
            event_id=self.event_id,
            event_type=spec.type,
            status="Started" if started else "Scheduled",
            resources=self.resources,
            resource_type=spec.resource_type,
            not_before=None if started or version is None else version.not_before,
            description=description,
            source=spec.source,
            duration=duration,
        )

    def change_times(self, approvals: Mapping[str, float]) -> list[float]:
        """Every scenario time at which this event's visible state may change."""
        start = self.start_time(approvals.get(self.event_id))
        removal = self.remove_time(start)
        times = [self.spec.appear, removal]
        times.extend(v.since for v in self.versions[1:] if v.since < start)
        if start < removal:
            times.append(start)
        return [x for x in times if x != float("inf")]
