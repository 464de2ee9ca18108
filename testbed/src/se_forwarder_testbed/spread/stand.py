"""The stand: one service of VMs, each a real agent process (``se-forwarder run``) polling its own
IMDS simulator, and the service's coordinator, Azurite, reached by each agent through its own
``network.Link`` (a partition cuts one agent's link; the store's kill -9 cuts everyone's).

Every VM has one Reboot announced at once with the same NotBefore; the simulators honour
approvals (the event starts ``approval_delay`` after one) and remove the event ``impact`` after
it started. Times of the scenario are scenario seconds, played ``speed`` times faster; the agents
run on the real clock, so ``retry`` and ``bound`` (the policy's ``retry_seconds`` and
``impact_bound_seconds``) are real seconds. One VM's simulator may run on a clock ``skew``
seconds off the agent's and the store's (``ShiftedClock``): its Date headers and its NotBefore
are then off by that much, as a VM whose clock disagrees with Azure's sees them.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from azure.core.credentials import AccessToken
from azure.storage.blob import ContainerClient

from se_forwarder.clock import SYSTEM, Clock

from ..agentproc import AgentProcess, write_config
from ..demo.network import Link
from ..simulator.scenario import Scenario
from ..simulator.server import Simulator
from ..standins.azurite import Azurite
from ..standins.tokens import STORAGE_AUDIENCE, TokenAuthority

SERVICE = "web"
CONTAINER = "se-forwarder-coordination"


@dataclass(frozen=True)
class Shape:
    """What is played: the service, its events, the policy (or none: the baseline)."""

    vms: int = 6
    zones: int = 3
    n: int = 2  # max_in_impact
    spread: str = "zone"  # zone | fault-domain | none
    notice: float = 900.0  # NotBefore, scenario seconds after the start
    impact: float = 120.0  # each VM's impact (Started to Removed), scenario seconds
    approval_delay: float = 10.0  # an approved event starts this much later, scenario seconds
    speed: float = 30.0  # scenario seconds per real second
    policy: bool = True  # approve = "service"; False: observe only (Azure starts at NotBefore)
    retry: float = 0.5  # retry_seconds, real
    bound: float = 10.0  # impact_bound_seconds, real
    skewed: int | None = None  # this VM's IMDS runs ``skew`` seconds off
    skew: float = 0.0  # real seconds (positive: Azure's clock ahead of the VM's)
    lead: float = 12.0  # real seconds from the agents' start to the announcement (they start up)

    def zone(self, i: int) -> str:
        return str(i % self.zones + 1)

    def real(self, scenario_seconds: float) -> float:
        return scenario_seconds / self.speed


class ShiftedClock(Clock):
    """The real clock, ``offset`` seconds off on the wall (monotonic time is the same)."""

    def __init__(self, offset: float) -> None:
        self.offset_ms = round(offset * 1000)

    def wall_ms(self) -> int:
        return SYSTEM.wall_ms() + self.offset_ms

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(timeout)

    def event(self) -> threading.Event:
        return threading.Event()


@dataclass
class Vm:
    index: int
    name: str
    zone: str
    sim: Simulator
    link: Link
    config: Path
    offset: float  # its simulator's clock minus the real one, seconds
    agent: AgentProcess | None = None
    starts: int = 0  # how many times its agent was started
    partitioned: bool = False  # its way to the store is cut

    def sink(self) -> Path:
        return self.config.parent / "records.jsonl"


def shape_lead(shape: Shape) -> float:
    """The announcement, in scenario seconds after the simulators' start."""
    return shape.lead * shape.speed


def scenario(shape: Shape, i: int) -> Scenario:
    appear = shape_lead(shape)
    event = {
        "type": "Reboot",
        "resources": ["$vm"],
        "source": "Platform",
        "appear": appear,
        "not_before": appear + shape.notice,
        "approval_delay": shape.approval_delay,
        "remove_after_start": shape.impact,
    }
    vm = {
        "name": f"{SERVICE}-{i}",
        "zone": shape.zone(i),
        "fault_domain": i % 2,
        "resource_group": "rg-spread",
        "tags": {"service": SERVICE},
    }
    return Scenario.model_validate({"name": "spread", "vm": vm, "events": [event]})


def policy_toml(shape: Shape, account_url: str, ca: Path) -> str:
    if not shape.policy:
        return ""
    return f"""
[[policy.rules]]
name = "spread the service"
event_types = ["Reboot"]
approve = "service"

[policy.service]
max_in_impact = {shape.n}
spread = "{shape.spread}"
account_url = "{account_url}"
container = "{CONTAINER}"
retry_seconds = {shape.retry}
impact_bound_seconds = {shape.bound}
ca_file = "{ca}"
"""


class Stand:
    def __init__(self, root: Path, shape: Shape) -> None:
        self.root, self.shape = Path(root), shape
        self.tokens = TokenAuthority()
        self.azurite = Azurite(self.root / "azurite")
        self.vms: list[Vm] = []
        self.t0 = 0.0  # real epoch seconds of the announcement (on every simulator)
        self.store_kills = 0
        self.store_up = True

    # -- up -------------------------------------------------------------------------------------

    def start(self) -> Stand:
        self.azurite.start()
        self._container().create_container()
        time.sleep(1.0 - time.time() % 1.0)  # one whole second: one rendered NotBefore for all
        for i in range(self.shape.vms):
            self.vms.append(self._vm(i))
        first = self.vms[0]
        self.t0 = first.sim.wall_time_of(shape_lead(self.shape)) - first.offset
        for vm in self.vms:
            self.start_agent(vm)
        return self

    def _container(self) -> ContainerClient:
        return ContainerClient(
            self.azurite.account_url,
            CONTAINER,
            credential=_Tokens(self.tokens),
            connection_verify=str(self.azurite.ca_cert),
        )

    def _vm(self, i: int) -> Vm:
        shape = self.shape
        offset = shape.skew if shape.skewed == i else 0.0
        clock = ShiftedClock(offset)
        sim = Simulator(
            scenario(shape, i),
            speed=shape.speed,
            token_authority=self.tokens,
            first_call_delay=0.0,
            clock=clock,
        ).start()
        link = Link(self.azurite.port)
        d = self.root / f"{SERVICE}-{i}"
        d.mkdir(parents=True, exist_ok=True)
        account = f"https://127.0.0.1:{link.port}/devstoreaccount1"
        extra = f'\n[identity]\ntoken_endpoint = "{sim.url}"\n'
        extra += policy_toml(shape, account, self.azurite.ca_cert)
        config = write_config(
            d / "agent.toml",
            sim.url,
            d / "state",
            poll_interval=0.5,
            file_sink=d / "records.jsonl",
            agent_extra='tags = ["service"]',
            extra=extra,
        )
        return Vm(i, f"{SERVICE}-{i}", shape.zone(i), sim, link, config, offset)

    # -- what the chaos does --------------------------------------------------------------------

    def start_agent(self, vm: Vm) -> None:
        vm.agent = AgentProcess(vm.config)
        vm.starts += 1

    def kill_agent(self, vm: Vm) -> None:
        """kill -9 (systemd starts it again: ``start_agent``)."""
        if vm.agent is not None:
            vm.agent.kill9()
            self._keep_log(vm)

    def _keep_log(self, vm: Vm) -> None:
        """The agent's log lines, kept beside its configuration (``agent.log``, every run)."""
        if vm.agent is not None:
            with (vm.config.parent / "agent.log").open("a") as f:
                f.writelines([*vm.agent.raw, f"-- stopped (start {vm.starts})\n"])

    def kill_store(self) -> None:
        """The store crashes as Azure Storage would: every connection cut at once (a request in
        flight unanswered, applied or not), nothing reachable until ``start_store``, every write
        it acknowledged kept. Azurite itself is stopped with SIGTERM: a SIGKILL of Azurite
        forgets the writes of its last 5 s (its metadata is saved every 5 s), which Azure
        Storage never does, and no coordination can hold on a store that forgets."""
        self.store_up = False
        self._links()
        self.azurite.stop()
        self.store_kills += 1

    def start_store(self) -> None:
        self.azurite.start()
        for vm in self.vms:
            vm.link.target_port = self.azurite.port
        self.store_up = True
        self._links()

    def partition(self, vm: Vm, cut: bool) -> None:
        """Cut (or restore) this agent's way to the store alone."""
        vm.partitioned = cut
        self._links()

    def _links(self) -> None:
        for vm in self.vms:
            up = self.store_up and not vm.partitioned
            if up and not vm.link.up:
                vm.link.restore()
            elif not up and vm.link.up:
                vm.link.cut()

    # -- down -----------------------------------------------------------------------------------

    def stop(self) -> None:
        for vm in self.vms:
            if vm.agent is not None and vm.agent.proc.poll() is None:
                try:
                    vm.agent.stop(timeout=10)
                except Exception:
                    vm.agent.kill9()
            self._keep_log(vm)
            vm.link.close()
            vm.sim.stop()
        self.azurite.stop()

    def __enter__(self) -> Stand:
        try:
            return self.start()
        except BaseException:
            self.stop()  # what did start: no process left behind
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Tokens:
    """The stand's own credential (azure-core's ``TokenCredential`` protocol): a storage token
    from the authority the simulators' token endpoints share, to create the container."""

    def __init__(self, tokens: TokenAuthority) -> None:
        self.tokens = tokens

    def get_token(self, *scopes: str, **kw: Any) -> AccessToken:
        token, expires_on = self.tokens.issue(STORAGE_AUDIENCE)
        return AccessToken(token, expires_on)
