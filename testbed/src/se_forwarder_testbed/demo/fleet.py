"""The demo's fleet: several simulated VMs, each with its own IMDS (a scenario of its own), an agent
or none, and what happens to the VM itself (a reboot, an eviction or deletion, a network cut).

A fleet file (``fleets/*.toml``) lists its VMs (``[[vms]]``: the instance document's identity,
``agent = false`` for a VM without the agent, ``outages``, Resource Health ``annotations``) and
its events once (``[[events]]``, resources named by VM name). A VM sees an event that names it or
a VM of its ``group`` (an availability set or a scale set's placement group: every member sees
every member's events, as in Azure). Event ids are derived from the fleet's name and the event's
place, so two runs give the same ids. A single-VM scenario (``simulator/scenarios``) is a fleet
of one.
"""

from __future__ import annotations

import tomllib
import uuid
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from se_forwarder.errors import ScenarioError

from ..simulator.scenario import (
    THIS_VM,
    EventSpec,
    FaultSpec,
    Scenario,
    Timeline,
    VmSpec,
    load_scenario,
)

NonNegative = Annotated[float, Field(ge=0)]
_IDS = uuid.UUID("6f1d2c0a-8e7b-4a55-b1c9-3d2e4f5a6b7c")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Outage(_Strict):
    """What happens to the VM itself. ``reboot``: the guest stops (the agent stops cleanly, as
    at a shutdown) from ``at`` and boots again at ``until`` (a new agent run on the same state);
    ``gone``: the VM is evicted or deleted at ``at`` (no goodbye reaches Log Analytics: its
    network goes with it); ``network``: nothing leaves the VM from ``at`` to ``until`` (what its
    agent commits meanwhile waits in the spool and arrives late)."""

    kind: Literal["reboot", "gone", "network"]
    at: NonNegative
    until: NonNegative | None = None
    note: str = ""  # what the timeline says at ``at`` (default: what the kind means)

    @model_validator(mode="after")
    def _span(self) -> Outage:
        if (self.kind == "gone") != (self.until is None):
            raise ValueError("until is required for reboot and network, not allowed for gone")
        if self.until is not None and self.until <= self.at:
            raise ValueError("until must be later than at")
        return self


class AnnotationSpec(_Strict):
    """A Resource Health annotation the platform publishes about this VM at ``at``."""

    at: NonNegative
    name: str
    impact: str = "Informational"
    context: str = "Platform Initiated"
    category: str = "Planned"


class FleetVm(VmSpec):
    agent: bool = True
    group: str = ""
    outages: list[Outage] = Field(default_factory=list)
    annotations: list[AnnotationSpec] = Field(default_factory=list)

    def spec(self) -> VmSpec:
        return VmSpec.model_validate(
            self.model_dump(by_alias=True, exclude={"agent", "group", "outages", "annotations"})
        )


class Fleet(_Strict):
    name: str = "fleet"
    description: str = ""
    speed: float = Field(default=60.0, gt=0)
    #: scenario seconds the demo plays (default: the last scripted change)
    duration: NonNegative | None = None
    vms: list[FleetVm] = Field(min_length=1)
    events: list[EventSpec] = Field(default_factory=list)
    faults: dict[str, list[FaultSpec]] = Field(default_factory=dict)  # by VM name

    @model_validator(mode="after")
    def _names(self) -> Fleet:
        names = [v.name for v in self.vms]
        if len(names) != len(set(names)):
            raise ValueError("VM names must be unique")
        for i, e in enumerate(self.events):
            unknown = [r for r in e.resources if r != THIS_VM and r not in names]
            if unknown and len(self.vms) > 1:
                raise ValueError(f"events[{i}] names VMs the fleet does not have: {unknown}")
        return self

    def event_id(self, index: int) -> str:
        e = self.events[index]
        return (e.id or str(uuid.uuid5(_IDS, f"{self.name}/{index}"))).upper()

    def sees(self, vm: FleetVm, event: EventSpec) -> bool:
        members = {v.name for v in self.vms if vm.group and v.group == vm.group} | {vm.name}
        return any(r == THIS_VM or r in members for r in event.resources)

    def scenario(self, vm: FleetVm) -> Scenario:
        """The IMDS of ``vm``: the events it sees (scenario seconds, speed 1: the clock is the
        demo's scaled one)."""
        events = [
            e.model_copy(update={"id": self.event_id(i)})
            for i, e in enumerate(self.events)
            if self.sees(vm, e)
        ]
        return Scenario(
            name=f"{self.name}/{vm.name}",
            speed=1.0,
            vm=vm.spec(),
            events=events,
            faults=self.faults.get(vm.name, []),
        )

    def timelines(self) -> list[Timeline]:
        """Every event's life, one each, as the platform knows it."""
        only = self.vms[0].name
        return [Timeline(e, self.event_id(i), only) for i, e in enumerate(self.events)]

    @property
    def end(self) -> float:
        if self.duration is not None:
            return self.duration
        times = [0.0]
        for tl in self.timelines():
            times.extend(tl.change_times({}))
        for v in self.vms:
            times.extend(t for o in v.outages for t in (o.at, o.until) if t is not None)
        times.extend(f.at for faults in self.faults.values() for f in faults)
        return max(times)

    @property
    def services(self) -> list[str]:
        return sorted({v.tags["service"] for v in self.vms if "service" in v.tags})


def builtin_names() -> list[str]:
    folder = importlib_resources.files(__package__).joinpath("fleets")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load(name_or_path: str | Path) -> Fleet:
    """A built-in fleet (``fleet``), a fleet file (it has ``[[vms]]``), or a single-VM scenario
    (built-in or file) as a fleet of one."""
    source = str(name_or_path)
    if source in builtin_names():
        text = (
            importlib_resources.files(__package__)
            .joinpath("fleets", f"{source}.toml")
            .read_text(encoding="utf-8")
        )
        return _parse(tomllib.loads(text), f"{source} (built-in)")
    path = Path(name_or_path)
    if path.suffix == ".toml" and path.is_file():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ScenarioError(f"{source}: {exc}") from None
        if "vms" in data:
            data.setdefault("name", path.stem)
            return _parse(data, source)
    return of_one(load_scenario(name_or_path))


def of_one(sc: Scenario) -> Fleet:
    vm = FleetVm.model_validate(sc.vm.model_dump(by_alias=True))
    return Fleet(
        name=sc.name,
        description=sc.description,
        speed=sc.speed,
        vms=[vm],
        events=list(sc.events),
        faults={vm.name: list(sc.faults)},
    )


def _parse(data: dict[str, Any], source: str) -> Fleet:
    try:
        return Fleet.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise ScenarioError(f"{source}: {where}: {err['msg']}") from None
