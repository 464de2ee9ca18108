"""``se-forwarder report`` on the agents' files and the collector's file together: the platform
table (``ScheduledEventsPlatform_CL``) read as the agents' tables are, and the report's verified
outcomes and agentless VMs equal to the generator's truth.

The fleet is the one ``tests/fleet_view/test_platform_collected.py`` checks the queries on (a
churning fleet whose generator also emits Azure's own record and VMs with no agent). Here the
rows go through files, as in the field: the agents' as the file sink writes them beside the
Logs Ingestion stand-in's ingestion times, the platform's through the collector's own
``PlatformRecord.to_row()`` and the real ``FileSink`` (``platform_path``), so the file is what
the collector writes; then the directory holding them is given to the report as a person would.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from helpers import fleetchurn as fc
from helpers.platformtruth import SPEC, expected_checks

from se_forwarder import cli, contract
from se_forwarder.collector.record import PlatformRecord
from se_forwarder.report import build, sources
from se_forwarder.sinks.file.sink import FileSink
from se_forwarder_testbed.fleet import generate

pytestmark = pytest.mark.e2e


def _lines(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")


def _collected(rows: list[dict]) -> list:
    """The generator's platform rows as the collector puts them in its outbox (no ingestion
    time: that is Log Analytics')."""
    return [
        PlatformRecord(**{k: v for k, v in r.items() if k in PlatformRecord.columns}).to_row()
        for r in rows
    ]


@pytest.fixture(scope="module")
def fleet():
    return generate(SPEC)


@pytest.fixture(scope="module")
def folder(fleet, tmp_path_factory) -> Path:
    """records.jsonl and heartbeats.jsonl of the agents, platform.jsonl of the collector."""
    out = tmp_path_factory.mktemp("platform-report")
    _lines(out / "records.jsonl", fleet.records)
    _lines(out / "heartbeats.jsonl", fleet.heartbeats)
    sink = FileSink(out / "unused-records.jsonl", platform_path=out / "platform.jsonl")
    assert sink.tables >= {contract.PLATFORM}
    rows = _collected(fleet.platform)
    for i in range(0, len(rows), 500):
        sink.send(rows[i : i + 500])
    assert not (out / "unused-records.jsonl").exists()
    return out


@pytest.fixture(scope="module")
def built(fleet, folder):
    rows = sources.read_paths([folder])
    assert [p.name for p in rows.files] == ["records.jsonl", "heartbeats.jsonl", "platform.jsonl"]
    return build.build(rows, build.dashboards_dir(), now=fc.dt(fleet.truth.end))


def test_the_collectors_file_is_read_beside_the_agents(fleet, folder, built):
    by_file = {ld.path.name: ld for ld in built.loads}
    assert by_file["platform.jsonl"].rows[contract.PLATFORM] == len(fleet.platform)
    assert by_file["platform.jsonl"].skipped_total == 0
    assert by_file["records.jsonl"].rows[contract.RECORDS] == len(fleet.records)
    assert (
        f"platform.jsonl: 0 records, 0 heartbeats, {len(fleet.platform):,} platform rows"
        in built.html
    )


def test_the_reports_verified_outcomes_are_the_truth(fleet, built):
    per: dict[str, Counter] = defaultdict(Counter)
    for (eid, _), (_, _, check) in expected_checks(fleet, fc.dt(fleet.truth.end)).items():
        per[eid][check] += 1
    want = {
        eid: (
            c["agrees"],
            c["resolved"],
            c["disagrees"],
            c["agent missed the end"],
            c["no agent record"],
        )
        for eid, c in per.items()
        if c["resolved"] + c["disagrees"] + c["agent missed the end"] + c["no agent record"] > 0
    }
    result = built.results["scheduled-events"]["verified-outcomes"]
    assert result.error is None
    got = {
        r["EventId"]: (
            r["Agrees"],
            r["Resolved"],
            r["Disagrees"],
            r["MissedEnd"],
            r["NoAgentRecord"],
        )
        for r in result.rows
    }
    assert want and {k: got.get(k) for k in want} == want
    assert sum(v[1] for v in want.values()) > 0 and sum(v[4] for v in want.values()) > 0


def test_the_reports_agentless_vms_are_the_truth(fleet, built):
    """Each VM no agent ever ran on: its events and the impactful ones still scheduled. The
    collector's file carries no ingestion time: a row is there from its TimeGenerated on."""
    end = fleet.truth.end
    want: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for f in fleet.truth.platform:
        if not f.agent and f.appear <= end:
            want[f.vm_name][0] += 1
            want[f.vm_name][1] += f.status == "Scheduled" and f.event_type in fc.IMPACTFUL
    result = built.results["scheduled-events"]["agentless-vms"]
    assert result.error is None
    assert {r["VmName"]: [r["Events"], r["ScheduledImpactful"]] for r in result.rows} == dict(want)
    assert len(want) == 3 and any(n for _, n in want.values())


def test_the_command_names_the_collectors_file(capsys):
    with pytest.raises(SystemExit):
        cli.main(["report", "--help"])
    assert "platform.jsonl" in " ".join(capsys.readouterr().out.split())


def test_a_directory_of_only_the_collectors_file_is_a_source(fleet, tmp_path):
    """The collector's directory alone (its file sink's platform.jsonl) is found."""
    sink = FileSink(tmp_path / "records.jsonl", platform_path=tmp_path / "platform.jsonl")
    sink.send(_collected(fleet.platform[:50]))
    assert [p.name for p in sources.read_paths([tmp_path]).files] == ["platform.jsonl"]
