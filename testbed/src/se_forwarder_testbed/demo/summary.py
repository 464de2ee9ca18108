"""The demo's summary, read back from what Log Analytics holds (the stand-in's file, with each
row's ingestion time), as a user would query it: per VM what arrived and how late; per event and
VM what the agents recorded beside what Azure's own record says happened, and the failed
deliveries, both from the report's own rows and queries (``fleet_report``), so the terminal and
the page never disagree."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from se_forwarder import contract, timefmt
from se_forwarder.report.kql.shims import INGESTION_COLUMN

from .fleet_report import OUTCOMES
from .play import Play, dur

if TYPE_CHECKING:
    from se_forwarder.report.build import Built

LATE = 600  # seconds between a row's making and its arrival that the summary calls late


def read_back(play: Play, standin: Any) -> tuple[dict[str, list[dict[str, Any]]], str]:
    """Rows by contract key ("records", "heartbeats", "platform"), one per RecordId, and where
    they were read from."""
    streams = {
        contract.table(k).stream: k
        for k in (contract.RECORDS, contract.HEARTBEATS, contract.PLATFORM)
    }
    rows: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
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


def _lateness(row: dict[str, Any]) -> float:
    if INGESTION_COLUMN not in row:
        return 0.0
    return (
        timefmt.parse_iso_ms(row[INGESTION_COLUMN]) - timefmt.parse_iso_ms(row["TimeGenerated"])
    ) / 1000


def summary(play: Play, standin: Any, built: Built | None, out: TextIO) -> None:
    rows, where = read_back(play, standin)
    records, beats = rows.get(contract.RECORDS, []), rows.get(contract.HEARTBEATS, [])
    platform = rows.get(contract.PLATFORM, [])
    print(
        f"Summary, {where}: {len(records)} records, {len(beats)} heartbeats"
        + (f", {len(platform)} rows of Azure's own record (the collector)" if standin else ""),
        file=out,
    )
    failed = _failed_deliveries(built)
    if failed:
        print(
            f"({failed} failed deliveries, by the agents' heartbeats as the report shows them: "
            "each retried or kept in its spool while a VM's network was down or gone)",
            file=out,
        )
    _per_vm(play, records, beats, platform, out)
    _per_event(built, out)
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


def _failed_deliveries(built: Built | None) -> int:
    """The report's own count: the agents' latest heartbeats (agent health, ``fleet``)."""
    if built is None:
        return 0
    fleet = built.results.get("agent-health", {}).get("fleet")
    return int(sum(r.get("FailedDeliveries") or 0 for r in fleet.rows)) if fleet else 0


def _per_vm(
    play: Play,
    records: list[dict[str, Any]],
    beats: list[dict[str, Any]],
    platform: list[dict[str, Any]],
    out: TextIO,
) -> None:
    by_vm: dict[str, Counter[str]] = defaultdict(Counter)
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


def _per_event(built: Built | None, out: TextIO) -> None:
    """One line per event and VM Azure's record names: the agents' outcome beside Azure's end,
    the report's verified outcomes (the library query, run on the report's rows)."""
    rows = built.library.get(OUTCOMES, []) if built is not None else []
    if not rows:
        print(
            "\n  (no verified outcomes: Azure's own record was not collected, or the report was "
            "not built; the agents' records are in the report's drill-down)",
            file=out,
        )
        return
    print(
        f"\n  {'EventId':<9}{'EventType':<10}{'VM':<16}  {'agent says':<21}{'Azure says':<12}"
        "verified",
        file=out,
    )

    def when(r: dict[str, Any]) -> tuple[str, str, str]:
        at = r.get("StartedAt") or r.get("NotBefore") or r.get("EndedAt")
        return (str(at or "~"), r["EventId"], r["VmName"])

    for r in sorted(rows, key=when):
        print(
            f"  {r['EventId'][:8]:<9}{r['EventType']:<10}{r['VmName']:<16}  "
            f"{r['AgentOutcome']:<21}{r['PlatformStatus']:<12}{r['Check']}",
            file=out,
        )
