"""A synthetic 24-hour trace (record-contract.md §1) for ``bench/replay_rate.py``.

One poll per second for a day (86,400 polls) of a VM named ``vm-bench-0`` in an availability set,
with a few dozen events whose lifecycles follow what the service really does: live-migration
freezes (15 min notice, a few seconds of impact), user reboots approved early, redeploys, Spot
preemptions of neighbours with 30 s notice, cancelled events, hardware failures that appear
already Started, re-schedules (NotBefore moves: an Updated record), events naming other VMs only
or several VMs at once. Plus a few bad observations (timeouts, 500, 410, an empty body) and one
agent stop/start around this VM's own reboot. Deterministic for a given seed.

    python gen_trace.py OUT.jsonl [--seed 1] [--hours 24]
"""

from __future__ import annotations

import argparse
import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

from se_forwarder.timefmt import format_ms
from se_forwarder_testbed.simulator.wire import wire_from_mapping

VM = "vm-bench-0"
NEIGHBOURS = [f"vm-bench-{i}" for i in range(1, 8)]
DAY0 = int(datetime(2026, 3, 2, tzinfo=UTC).timestamp())  # epoch seconds at t = 0
DAY0_MS = DAY0 * 1000

FREEZE_TEXT = (
    "Virtual machine is being paused because of a memory-preserving Live Migration operation."
)
REBOOT_TEXT = "Virtual machine is going to be restarted as requested by authorized user."
REDEPLOY_TEXT = "Virtual machine is going to be redeployed to another host."
PREEMPT_TEXT = "Virtual machine is being evicted."
HW_TEXT = "Virtual machine is being restarted because of a host hardware failure."


@dataclass
class Ev:
    """One event: (from second, wire dict) steps; absent before the first and after ``gone``."""

    steps: list[tuple[int, dict]] = field(default_factory=list)
    gone: int = 0

    def at(self, sec: int) -> dict | None:
        if not self.steps or sec < self.steps[0][0] or sec >= self.gone:
            return None
        cur = None
        for start, wire in self.steps:
            if start <= sec:
                cur = wire
        return cur


def _wire(
    eid: str,
    status: str,
    etype: str,
    resources: list[str],
    not_before: int | None,
    text: str,
    source: str,
    duration: int,
) -> dict:
    """The event in full 2020-07-01 form, as the simulator renders it (NotBefore in RFC 1123)."""
    return wire_from_mapping(
        {
            "EventId": eid,
            "EventStatus": status,
            "EventType": etype,
            "Resources": resources,
            "NotBefore": "" if not_before is None else DAY0 + not_before,
            "Description": text,
            "EventSource": source,
            "DurationInSeconds": duration,
        }
    )


def build_events(rng: random.Random, seconds: int) -> tuple[list[Ev], list[tuple[int, int]]]:
    """The events, and the agent's (stop, start) seconds."""
    evs: list[Ev] = []
    outages: list[tuple[int, int]] = []

    def eid() -> str:
        return str(uuid.UUID(int=rng.getrandbits(128), version=4)).upper()

    def lifecycle(
        t0: int,
        etype: str,
        res: list[str],
        text: str,
        source: str,
        duration: int,
        notice: int | None,
        start_at: int | None,
        impact: int,
        reschedule_to: int | None = None,
        reschedule_at: int | None = None,
    ) -> Ev:
        i = eid()
        ev = Ev()
        nb = None if notice is None else t0 + notice
        if nb is None:  # appears already Started (hardware failure)
            ev.steps.append((t0, _wire(i, "Started", etype, res, None, text, source, duration)))
            ev.gone = t0 + impact
            return ev
        ev.steps.append((t0, _wire(i, "Scheduled", etype, res, nb, text, source, duration)))
        if reschedule_at is not None and reschedule_to is not None:
            nb = reschedule_to
            ev.steps.append(
                (reschedule_at, _wire(i, "Scheduled", etype, res, nb, text, source, duration))
            )
        if start_at is None:  # cancelled: removed while Scheduled
            ev.gone = t0 + impact
            return ev
        ev.steps.append((start_at, _wire(i, "Started", etype, res, None, text, source, duration)))
        ev.gone = start_at + impact
        return ev

    span = seconds - 3600  # the longest lifecycle (a re-schedule) ends within the hour
    if span <= 600:
        raise ValueError("a trace needs at least 2 hours")
    population = range(600, span, 60)
    slots = sorted(rng.sample(population, min(36, len(population))))
    kinds = (
        ["freeze"] * 12
        + ["freeze_set"] * 4
        + ["reboot_user"] * 3
        + ["redeploy"] * 3
        + ["preempt_neighbour"] * 4
        + ["cancelled"] * 3
        + ["hardware"] * 2
        + ["reschedule"] * 3
        + ["other_vms"] * 2
    )
    rng.shuffle(kinds)
    own_reboot_done = False
    for t0, kind in zip(slots, kinds, strict=False):
        if kind == "freeze":
            nb_notice = 900
            evs.append(
                lifecycle(
                    t0,
                    "Freeze",
                    [VM],
                    FREEZE_TEXT,
                    "Platform",
                    rng.randint(3, 9),
                    nb_notice,
                    t0 + nb_notice + rng.randint(0, 2),
                    rng.randint(6, 15),
                )
            )
        elif kind == "freeze_set":  # one event, several VMs of the set
            res = [VM, *rng.sample(NEIGHBOURS, 3)]
            evs.append(
                lifecycle(
                    t0,
                    "Freeze",
                    res,
                    FREEZE_TEXT,
                    "Platform",
                    rng.randint(3, 9),
                    900,
                    t0 + 900 + rng.randint(0, 2),
                    rng.randint(6, 15),
                )
            )
        elif kind == "reboot_user":  # approved early by the user's own tooling
            start = t0 + rng.randint(20, 120)
            ev = lifecycle(
                t0, "Reboot", [VM], REBOOT_TEXT, "User", -1, 900, start, rng.randint(60, 180)
            )
            evs.append(ev)
            if not own_reboot_done:  # the VM reboots: the agent goes down with it
                outages.append((start + 3, start + 3 + rng.randint(45, 90)))
                own_reboot_done = True
        elif kind == "redeploy":
            evs.append(
                lifecycle(
                    t0,
                    "Redeploy",
                    [VM],
                    REDEPLOY_TEXT,
                    "Platform",
                    -1,
                    600,
                    t0 + 600 + rng.randint(0, 5),
                    rng.randint(120, 400),
                )
            )
        elif kind == "preempt_neighbour":
            evs.append(
                lifecycle(
                    t0,
                    "Preempt",
                    [rng.choice(NEIGHBOURS)],
                    PREEMPT_TEXT,
                    "Platform",
                    -1,
                    30,
                    t0 + 30,
                    rng.randint(30, 90),
                )
            )
        elif kind == "cancelled":
            evs.append(
                lifecycle(
                    t0,
                    "Reboot",
                    [VM],
                    REBOOT_TEXT,
                    "Platform",
                    -1,
                    900,
                    None,
                    rng.randint(120, 600),
                )
            )
        elif kind == "hardware":
            evs.append(
                lifecycle(
                    t0, "Reboot", [VM], HW_TEXT, "Platform", -1, None, None, rng.randint(90, 300)
                )
            )
        elif kind == "reschedule":
            later = t0 + 900 + rng.randint(600, 1800)
            evs.append(
                lifecycle(
                    t0,
                    "Reboot",
                    [VM],
                    REBOOT_TEXT,
                    "Platform",
                    -1,
                    900,
                    later + rng.randint(0, 2),
                    rng.randint(60, 200),
                    reschedule_to=later,
                    reschedule_at=t0 + rng.randint(60, 600),
                )
            )
        else:  # other_vms: the availability set's neighbours only
            evs.append(
                lifecycle(
                    t0,
                    "Freeze",
                    rng.sample(NEIGHBOURS, 2),
                    FREEZE_TEXT,
                    "Platform",
                    5,
                    900,
                    t0 + 900,
                    10,
                )
            )
    return evs, outages


def generate(out: Path, *, seed: int = 1, seconds: int = 86_400) -> dict:
    """Write the trace; returns counts (lines, polls, events, errors, changes)."""
    rng = random.Random(seed)
    evs, outages = build_events(rng, seconds)
    bounds = sorted({0, seconds, *(s for e in evs for s, _ in e.steps), *(e.gone for e in evs)})
    error_secs = dict.fromkeys(rng.sample(range(60, seconds - 60), 12))
    kinds = ["timeout"] * 5 + ["500"] * 3 + ["410"] * 2 + ["empty"] * 1 + ["refused"] * 1
    for s, k in zip(list(error_secs), kinds, strict=False):
        error_secs[s] = k
    stops = dict(outages)
    incarnation = 1
    doc_line = ""
    prev_events: list[dict] | None = None
    lines = polls = errors = changes = 0
    down_until = -1
    with out.open("w", encoding="utf-8") as f:
        w = f.write
        for lo, hi in pairwise(bounds):
            if lo >= seconds:
                break
            events = [x for x in (e.at(lo) for e in evs) if x is not None]
            if events != prev_events:
                if prev_events is not None:
                    incarnation += 1
                    changes += 1
                prev_events = events
                doc_line = json.dumps(
                    {"DocumentIncarnation": incarnation, "Events": events}, separators=(", ", ": ")
                )
            for sec in range(lo, min(hi, seconds)):
                ms = sec * 1000 + rng.randint(0, 40)  # a poll's own jitter
                if sec < down_until:
                    continue
                if sec == down_until:
                    w(f'{{"at": "{format_ms(DAY0_MS + sec * 1000)}", "agent": "start"}}\n')
                    lines += 1
                if sec in stops:
                    w(f'{{"at": "{format_ms(DAY0_MS + sec * 1000 + 500)}", "agent": "stop"}}\n')
                    lines += 1
                    down_until = stops[sec]
                    continue
                at = format_ms(DAY0_MS + ms)
                polls += 1
                lines += 1
                k = error_secs.get(sec)
                if k is None:
                    w(f'{{"at": "{at}", "status": 200, "body": {doc_line}}}\n')
                    continue
                errors += 1
                if k == "timeout":
                    w(f'{{"at": "{at}", "error": "timeout"}}\n')
                elif k == "refused":
                    w(f'{{"at": "{at}", "error": "connection refused"}}\n')
                elif k == "500":
                    w(f'{{"at": "{at}", "status": 500, "text": "Internal Server Error"}}\n')
                elif k == "410":
                    w(f'{{"at": "{at}", "status": 410, "text": "Gone"}}\n')
                else:
                    w(f'{{"at": "{at}", "status": 200, "text": ""}}\n')
    return {
        "lines": lines,
        "polls": polls,
        "events": len(evs),
        "errors": errors,
        "changes": changes,
        "restarts": len(outages),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description="write a synthetic 24-hour Scheduled Events trace")
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hours", type=float, default=24.0)
    args = ap.parse_args()
    info = generate(args.out, seed=args.seed, seconds=int(args.hours * 3600))
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
