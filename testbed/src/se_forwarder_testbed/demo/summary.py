"""The demo's summary, read back from what Log Analytics holds (the stand-in's file, with each
row's ingestion time), as a user would query it: per VM what arrived and how late, per event
what the agents recorded beside what Azure's own record says happened."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, TextIO

from se_forwarder import contract, timefmt
from se_forwarder.report.kql.shims import INGESTION_COLUMN

from .play import Play, dur

LATE = 600  # seconds between a row's making and its arrival that the summary calls late


def read_back(play: Play, standin: Any) -> tuple[dict[str, list[dict]], str]:
    """Rows by contract key ("records", "heartbeats", "platform"), one per RecordId, and where
    they were read from."""
    streams = {
        contract.table(k).stream: k
        for k in (contract.RECORDS, contract.HEARTBEATS, contract.PLATFORM)
    }
    rows: dict[str, dict[str, dict]] = defaultdict(dict)
    if standin is not None:
        path = standin.records_file
        for line in path.read_text("utf-8").splitlines():
            item = json.loads(line)
            rows[streams[item["stream"]]].setdefault(item["record"]["RecordId"], item["record"])
        where = f"read back from the Log Analytics stand-in ({path.name})"
    else:
        for m in play.machines:
            for key, name in (
                (contract.RECORDS, "records.jsonl"),
                (contract.HEARTBEATS, "heartbeats.jsonl"),
            ):
                path = Path(m.config.agent.state_dir).parent / name
                if path.exists():
                    for line in path.read_text("utf-8").splitlines():
                        r = json.loads(line)
                        rows[key].setdefault(r["RecordId"], r)
        where = "read back from the file sinks (vms/*/records.jsonl)"
    return {k: list(v.values()) for k, v in rows.items()}, where


def _lateness(row: dict) -> float:
    if INGESTION_COLUMN not in row:
        return 0.0
    return (
        timefmt.parse_iso_ms(row[INGESTION_COLUMN]) - timefmt.parse_iso_ms(row["TimeGenerated"])
    ) / 1000


def summary(play: Play, standin: Any, out: TextIO) -> None:
    rows, where = read_back(play, standin)
    records, beats = rows.get(contract.RECORDS, []), rows.get(contract.HEARTBEATS, [])
    platform = rows.get(contract.PLATFORM, [])
    print(
        f"Summary, {where}: {len(records)} records, {len(beats)} heartbeats"
        + (f", {len(platform)} rows of Azure's own record (the collector)" if standin else ""),
        file=out,
    )
    if play.retries.count:
        print(
            f"({play.retries.count} delivery attempts failed while a VM's network was down or "
            "gone, each retried or kept in its spool; not shown above)",
            file=out,
        )
    _per_vm(play, records, beats, platform, out)
    _per_event(play, records, platform, out)
    base = play.base
    print(
        f"\nRecords per VM: {base / 'vms'}/<vm>/records.jsonl; agent state: "
        f"{base / 'vms'}/<vm>/state",
        file=out,
    )
    if standin is not None:
        print(
            f"Log Analytics stand-in copy: {standin.records_file} (with each row's ingestion time)",
            file=out,
        )


def _per_vm(
    play: Play, records: list[dict], beats: list[dict], platform: list[dict], out: TextIO
) -> None:
    by_vm: dict[str, Counter] = defaultdict(Counter)
    late: dict[str, float] = defaultdict(float)
    last_beat: dict[str, str] = {}
    for kind, rs in (("records", records), ("heartbeats", beats)):
        for r in rs:
            by_vm[r["VmName"]][kind] += 1
            late[r["VmName"]] = max(late[r["VmName"]], _lateness(r))
    for b in beats:
        last_beat[b["VmName"]] = max(last_beat.get(b["VmName"], ""), b["TimeGenerated"])
    for p in platform:
        by_vm[(p.get("VmName") or "").lower()]["platform"] += 1
    print(
        f"\n  {'VM':<16}{'service':<10}{'agent':<7}{'records':>8}{'beats':>7}{'Azure':>7}  "
        "what happened",
        file=out,
    )
    for vm in play.fleet.vms:
        c = (
            by_vm[vm.name] + by_vm[vm.name.lower()]
            if vm.name != vm.name.lower()
            else by_vm[vm.name]
        )
        notes = []
        gone = next((o for o in vm.outages if o.kind == "gone"), None)
        if gone is not None:
            what = gone.note.split(":")[0].split(";")[0] or "gone"
            notes.append(
                f"{what} at {play.clock_text(play.wall_ms(gone.at) / 1000)}; last "
                f"heartbeat {last_beat.get(vm.name, '-')[11:19]}"
            )
        if any(o.kind == "reboot" for o in vm.outages):
            notes.append("rebooted")
        if late[vm.name] >= LATE:
            notes.append(f"rows arrived up to {dur(late[vm.name])} late")
        if not vm.agent:
            notes.append("no agent: known from Azure's own record only")
        print(
            f"  {vm.name:<16}{vm.tags.get('service', '-'):<10}{'yes' if vm.agent else 'no':<7}"
            f"{c['records']:>8}{c['heartbeats']:>7}{c['platform']:>7}  {'; '.join(notes)}",
            file=out,
        )


def _per_event(play: Play, records: list[dict], platform: list[dict], out: TextIO) -> None:
    """One line per event: the VMs it hits, the agents' outcome there, Azure's end."""
    names = {vm.name.lower(): vm.name for vm in play.fleet.vms}
    ends: dict[str, str] = {}
    order = {"Scheduled": 0, "Started": 1, "Completed": 2, "Canceled": 2}
    for p in platform:
        if p.get("EventId"):
            eid = p["EventId"].upper()
            if order.get(p["EventStatus"], 0) >= order.get(ends.get(eid, ""), -1):
                ends[eid] = p["EventStatus"]
    agent: dict[tuple[str, str], dict] = {}
    notice: dict[str, float] = {}
    window: dict[str, float] = {}
    for r in sorted(records, key=lambda r: r["TimeGenerated"]):
        eid = r["EventId"].upper()
        if r["Phase"] == "FirstSeen" and r.get("NoticeSeconds") is not None:
            notice.setdefault(eid, r["NoticeSeconds"])
        if r["AffectsThisVm"] and r["Phase"] != "Approved":
            agent[(eid, r["VmName"])] = r
            if r["Phase"] == "Removed" and r.get("SinceStartedSeconds") is not None:
                window[eid] = r["SinceStartedSeconds"]
    print(
        f"\n  {'EventId':<9}{'EventType':<10}{'VM':<16}{'notice':>8}{'window':>8}  "
        f"{'agent says':<22}Azure says",
        file=out,
    )
    for tl in play.fleet.timelines():
        eid, e = tl.event_id, tl.spec
        for name in tl.resources:
            vm = names.get(name.lower(), name)
            r = agent.get((eid, vm))
            fleet_vm = next((v for v in play.fleet.vms if v.name == vm), None)
            said = (
                "no agent"
                if fleet_vm is not None and not fleet_vm.agent
                else "-"
                if r is None
                else r["Outcome"]
                if r["Phase"] == "Removed"
                else f"{r['Phase']} (open)"
            )

            def fmt(v):
                return "-" if v is None else dur(v)

            print(
                f"  {eid[:8]:<9}{e.type:<10}{vm:<16}{fmt(notice.get(eid)):>8}"
                f"{fmt(window.get(eid)):>8}  {said:<22}{ends.get(eid, '-')}",
                file=out,
            )
