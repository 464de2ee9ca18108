"""What se-forwarder costs in Log Analytics: bytes per VM-day per table, measured on the rows the
Logs Ingestion stand-in received, and the monthly ingestion and retention cost at 1k, 10k and 100k
VMs, with the formula and the levers (docs/cost.md).

Measured: ``se-forwarder demo`` (the demo fleet: real agents, the real Logs Ingestion SDK, the real
collector reading the Resource Graph stand-in) writes every row the stand-in accepted to
``log-analytics.jsonl``. For each table this bench takes, from those rows:

* the billed size of a row, as Microsoft computes it: the length of the string representation of
  every stored column (GB = 10^9 bytes; ``_``-prefixed system columns excluded; a null column is
  not stored), beside the row's JSON size on the wire (the upper bound);
* how many rows a VM makes: heartbeats per VM-hour of scenario time (set by the heartbeat
  interval), agent records per event a VM saw, Azure's platform rows per event and VM.

Modelled (parameters, printed): the heartbeat interval (300 s, the agent's default), impactful and
other events a VM sees per month (``--events-per-vm-month``, default 4: a few platform maintenance
operations a month, Microsoft documents no figure), the price per GB and the retention.

    monthly GB  = VMs x 30 x bytes per VM-day / 10^9
    bytes/VM-day = 86,400 / heartbeat interval x heartbeat row
                 + events per VM-day x (records per event x record row + platform rows per event x
                 platform row)
    ingestion   = max(0, monthly GB - free GB) x price per GB
    retention   = monthly GB x (interactive days - 31)/30 x interactive price per GB-month
                  + monthly GB x (total days - interactive days)/30 x long-term price per GB-month
                  (steady state: each month's data is kept for the whole period)

Prices (``--price-per-gb`` and the retention prices are parameters): Microsoft's list prices
for the Analytics plan, pay-as-you-go, East US, as published in 2025: ingestion USD 2.30/GB (first
5 GB per workspace and month free), interactive retention beyond 31 days USD 0.10/GB-month,
long-term retention USD 0.02/GB-month; the Basic plan USD 0.50/GB; Event Hubs Standard USD 0.03
per throughput unit and hour and USD 0.028 per million ingress events. Prices are regional and
change: check the Azure pricing pages for yours (these figures are not fetched by the bench).

    .venv/bin/python bench/cost_model.py                 # ~80 s: the demo fleet at speed 60
    .venv/bin/python bench/cost_model.py --from DIR      # a demo's output directory, no new run
    .venv/bin/python bench/cost_model.py --quick         # ~30 s: the demo at speed 180
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from se_forwarder_testbed.agentproc import se_forwarder_cmd

REPO = Path(__file__).resolve().parents[1]
CONTRACT = json.loads((REPO / "src/se_forwarder/contract.json").read_text("utf-8"))
TABLES = {spec["stream"]: (key, spec["table"]) for key, spec in CONTRACT["tables"].items()}
FLEET_SECONDS = 2700  # the demo fleet's scenario duration (testbed demo/fleets/fleet.toml)
GB = 10**9
DAYS_PER_MONTH = 30
FLEETS = (1_000, 10_000, 100_000)


def billed_bytes(row: dict[str, Any]) -> int:
    """Microsoft's billed size of a row: the string representation of each stored column (a
    dynamic column as its JSON text), system columns (``_...``) and nulls left out."""
    total = 0
    for name, value in row.items():
        if name.startswith("_") or value is None:
            continue
        if isinstance(value, (dict, list)):
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        total += len(text.encode("utf-8"))
    return total


def wire_bytes(row: dict[str, Any]) -> int:
    clean = {k: v for k, v in row.items() if not k.startswith("_")}
    return len(json.dumps(clean, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def run_demo(speed: float, workdir: Path) -> Path:
    out = workdir / "demo"
    proc = subprocess.run(
        [*se_forwarder_cmd(), "demo", "--dir", str(out), "--speed", str(speed)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(
            "se-forwarder demo exited "
            f"{proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return out


def measure(rows_file: Path) -> dict[str, dict[str, float]]:
    """Per table: rows, mean billed and wire bytes per row, and the rate that scales it."""
    by_stream: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in rows_file.read_text("utf-8").splitlines():
        item = json.loads(line)
        by_stream[item["stream"]].append(item["record"])
    out: dict[str, dict[str, float]] = {}
    for stream, rows in by_stream.items():
        key, _table = TABLES[stream]
        m: dict[str, float] = {
            "rows": len(rows),
            "billed": statistics.fmean(billed_bytes(r) for r in rows),
            "wire": statistics.fmean(wire_bytes(r) for r in rows),
        }
        if key == "heartbeats":
            vms = {r.get("VmId") for r in rows}
            m["vms"] = len(vms)
            m["per_vm_hour"] = len(rows) / len(vms) / (FLEET_SECONDS / 3600)
        elif key == "records":
            pairs = {(r.get("VmId"), r.get("EventId")) for r in rows if r.get("EventId")}
            m["per_event"] = len(rows) / max(1, len(pairs))
        else:
            pairs = {(r.get("VmName"), r.get("EventId") or r.get("AnnotationId")) for r in rows}
            m["per_event"] = len(rows) / max(1, len(pairs))
        out[key] = m
    missing = {"heartbeats", "records", "platform"} - set(out)
    if missing:
        sys.exit(f"no rows for {sorted(missing)} in {rows_file}")
    return out


def per_vm_day(
    m: dict[str, dict[str, float]], heartbeat: float, events_month: float
) -> dict[str, float]:
    events_day = events_month / DAYS_PER_MONTH
    return {
        "heartbeats": 86_400 / heartbeat * m["heartbeats"]["billed"],
        "records": events_day * m["records"]["per_event"] * m["records"]["billed"],
        "platform": events_day * m["platform"]["per_event"] * m["platform"]["billed"],
    }


def monthly(bytes_day: float, vms: int, a: argparse.Namespace) -> tuple[float, float, float]:
    """(GB a month, ingestion USD, retention USD) for a fleet."""
    gb = vms * DAYS_PER_MONTH * bytes_day / GB
    ingestion = max(0.0, gb - a.free_gb) * a.price_per_gb
    interactive = max(0, a.retention_days - 31) / DAYS_PER_MONTH * gb * a.retention_price
    long_term = (
        max(0, a.total_retention_days - a.retention_days) / DAYS_PER_MONTH * gb * a.archive_price
    )
    return gb, ingestion, interactive + long_term


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the demo at speed 180 (~30 s)")
    p.add_argument("--from", dest="source", type=Path, help="a demo output directory to read")
    p.add_argument("--heartbeat-interval", type=float, default=300.0, help="seconds (default 300)")
    p.add_argument("--events-per-vm-month", type=float, default=4.0)
    p.add_argument("--price-per-gb", type=float, default=2.30, help="Analytics plan, USD/GB")
    p.add_argument("--basic-price-per-gb", type=float, default=0.50, help="Basic plan, USD/GB")
    p.add_argument("--free-gb", type=float, default=5.0, help="free GB a workspace-month")
    p.add_argument("--retention-days", type=int, default=90, help="interactive (tables.bicep)")
    p.add_argument("--total-retention-days", type=int, default=365, help="with long-term")
    p.add_argument("--retention-price", type=float, default=0.10, help="USD/GB-month past 31 d")
    p.add_argument("--archive-price", type=float, default=0.02, help="long-term, USD/GB-month")
    p.add_argument(
        "--eh-tu-price", type=float, default=0.03, help="Event Hubs Standard, USD/TU-hour"
    )
    p.add_argument("--eh-event-price", type=float, default=0.028, help="USD per million events")
    a = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="cost-model-") as tmp:
        source = a.source or run_demo(180.0 if a.quick else 60.0, Path(tmp))
        m = measure(source / "log-analytics.jsonl")

    hb = m["heartbeats"]
    print("Measured on the rows the Logs Ingestion stand-in received (se-forwarder demo):")
    print(f"{'table':<30}{'rows':>6}{'billed B/row':>14}{'wire B/row':>12}  rate")
    for key, (_, table) in sorted((v[0], (k, v[1])) for k, v in TABLES.items()):
        t = m[key]
        rate = (
            f"{t['per_vm_hour']:.1f} rows/VM-hour (interval {a.heartbeat_interval:.0f} s: "
            f"{3600 / a.heartbeat_interval:.1f})"
            if key == "heartbeats"
            else f"{t['per_event']:.2f} rows per event and VM"
        )
        print(f"{table:<30}{int(t['rows']):>6}{t['billed']:>14.0f}{t['wire']:>12.0f}  {rate}")

    day = per_vm_day(m, a.heartbeat_interval, a.events_per_vm_month)
    total_day = sum(day.values())
    print()
    print(
        f"Bytes per VM-day (billed), heartbeat every {a.heartbeat_interval:.0f} s, "
        f"{a.events_per_vm_month:g} events per VM-month:"
    )
    for key, value in day.items():
        print(f"  {key:<12}{value:>10,.0f} B  {100 * value / total_day:5.1f} %")
    print(f"  {'total':<12}{total_day:>10,.0f} B   ({hb['vms']:.0f} VMs measured)")

    print()
    print(
        f"Monthly cost, Analytics plan at USD {a.price_per_gb:.2f}/GB ({a.free_gb:g} GB free), "
        f"retention {a.retention_days} d interactive (USD {a.retention_price:.2f}/GB-month past "
        f"31 d), {a.total_retention_days} d total (USD {a.archive_price:.2f}/GB-month long-term):"
    )
    print(f"{'VMs':>8}{'GB/month':>12}{'ingestion':>14}{'retention':>14}{'total USD':>14}")
    for vms in FLEETS:
        gb, ing, ret = monthly(total_day, vms, a)
        print(f"{vms:>8,}{gb:>12,.1f}{ing:>14,.2f}{ret:>14,.2f}{ing + ret:>14,.2f}")

    print()
    print(
        "The Event Hubs sink (optional, deployEventHubs=true): one message per row; a throughput "
        "unit takes 1,000 events/s or 1 MB/s in"
    )
    print(f"{'VMs':>8}{'events/s':>12}{'TUs':>6}{'USD/month':>12}")
    rows_day = (
        86_400 / a.heartbeat_interval
        + a.events_per_vm_month / DAYS_PER_MONTH * (m["records"]["per_event"])
    )
    for vms in FLEETS:
        rate = vms * rows_day / 86_400
        mb_s = rate * m["heartbeats"]["wire"] / 1e6
        tus = max(1, int(-(-max(rate / 1000, mb_s) // 1)))
        usd = (
            tus * a.eh_tu_price * 24 * DAYS_PER_MONTH
            + vms * rows_day * DAYS_PER_MONTH / 1e6 * a.eh_event_price
        )
        print(f"{vms:>8,}{rate:>12,.1f}{tus:>6}{usd:>12,.2f}")

    print()
    print("Levers at 10,000 VMs (USD/month, ingestion + retention; each alone):")
    base_gb, base_ing, base_ret = monthly(total_day, 10_000, a)
    base = base_ing + base_ret
    for interval in (600.0, 900.0):
        d = sum(per_vm_day(m, interval, a.events_per_vm_month).values())
        _, i, r = monthly(d, 10_000, a)
        print(f"  heartbeat every {interval:.0f} s{'':<14}{i + r:>12,.2f}  ({i + r - base:+,.2f})")
    hb_gb = 10_000 * DAYS_PER_MONTH * day["heartbeats"] / GB
    basic = base - hb_gb * (a.price_per_gb - a.basic_price_per_gb)
    print(f"  heartbeats table on the Basic plan{'':<1}{basic:>12,.2f}  ({basic - base:+,.2f})")
    short = argparse.Namespace(**{**vars(a), "retention_days": 31, "total_retention_days": 31})
    _, i, r = monthly(total_day, 10_000, short)
    print(f"  31 days of retention only{'':<10}{i + r:>12,.2f}  ({i + r - base:+,.2f})")
    print(f"  (baseline{'':<27}{base:>12,.2f}; {base_gb:,.1f} GB/month)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
