"""``se-forwarder report``: the fleet view of a known fleet rendered, opened in headless Chromium
(screenshot kept under the test's tmp dir), and its key numbers read from the rendered page
against the same numbers computed in Python; and every kind of bad input."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
import warnings
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers import argfleet
from helpers import fleetview as fv
from helpers.fleetrun import item_span

from se_forwarder import cli
from se_forwarder.report import charts
from se_forwarder.timefmt import format_ms
from se_forwarder_testbed.fleet import FleetSpec, generate

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def fleet():
    return generate(FleetSpec())


@pytest.fixture(scope="module")
def sink_files(fleet, tmp_path_factory) -> Path:
    """The fleet as the file sink writes it (records.jsonl, heartbeats.jsonl)."""
    d = tmp_path_factory.mktemp("sink")
    for name, rows in (("records.jsonl", fleet.records), ("heartbeats.jsonl", fleet.heartbeats)):
        (d / name).write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return d


def _now(fleet) -> str:
    return format_ms(fleet.truth.end)


def chromium(page: Path, out: Path) -> str:
    """Open ``page`` in headless Chromium: a screenshot to ``out`` and the rendered DOM."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "Debian's chromium is not installed (scripts/test.sh installs it)"
    profile = out.parent / "chromium-profile"
    base = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1400,2400"]
    shot = subprocess.run([*base, f"--screenshot={out}", page.as_uri()], capture_output=True,
                          timeout=120, check=False)
    assert shot.returncode == 0 and out.stat().st_size > 10_000, shot.stderr[-2000:]
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120, check=False)
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


def tiles(dom: str, article: str) -> dict[str, str]:
    """Tile title -> the number shown, inside one workbook's part of the page."""
    part = dom.split(f'<article id="{article}"', 1)[1].split("</article>", 1)[0]
    return dict(re.findall(r'data-metric="([^"]+)"><div class="tile-value">([^<]*)</div>', part))


@pytest.mark.external
@pytest.mark.e2e
def test_the_report_of_a_known_fleet_shows_its_numbers_in_chromium(fleet, sink_files, tmp_path):
    out = tmp_path / "report.html"
    arg = argfleet.write(tmp_path / "arg.json", argfleet.platform_rows(fleet))
    rc = cli.main(["report", str(sink_files), "--now", _now(fleet), "--out", str(out),
                   "--arg-file", str(arg)])
    assert rc == 0 and out.is_file()
    page = out.read_text("utf-8")
    assert not re.search(r'(src|href)="https?:|url\(https?:|<script|<link|@import', page)
    dom = chromium(out, tmp_path / "report.png")
    now = fv.ts(_now(fleet))
    records = fv.visible(fleet.records, now, item_span("scheduled-events", "range-tiles"))
    ev = fv.events(records)
    shown = tiles(dom, "scheduled-events")
    assert shown["Events"] == str(len(ev))
    assert shown["Started"] == str(sum(1 for e in ev.values() if e.started))
    assert shown["Outcome unknown"] == str(sum(1 for e in ev.values()
                                               if e.removed and not e.started and not e.cancelled))
    span = item_span("agent-health", "fleet")
    status = fv.agent_status(fv.visible(fleet.records, now, span),
                             fv.visible(fleet.heartbeats, now, span), now)
    agents = tiles(dom, "agent-health")
    assert agents["Agents reporting"] == str(sum(1 for s in status.values() if s in ("ok", "degraded")))
    assert agents["Silent"] == str(sum(1 for s in status.values() if s == "silent"))
    # Azure's own record: every VM with no agent is listed among the coverage gaps
    gaps = dom.split('data-item="coverage-gaps"', 1)[1].split("</section>", 1)[0]
    assert all(f"no-agent-vm-{k}" in gaps for k in range(3))


@pytest.fixture(scope="module")
def failing_panels(fleet, sink_files, tmp_path_factory) -> tuple[str, str]:
    """One report (page, what the command printed) for both ways a panel fails: no --arg-file,
    and a workbook query broken on purpose (a full build costs tens of seconds)."""
    tmp = tmp_path_factory.mktemp("failing")
    dash = tmp / "dashboards"
    shutil.copytree(Path(cli.__file__).resolve().parents[2] / "dashboards", dash)
    broken = dash / "queries" / "workbook" / "scheduled-events" / "many-vms.kql"
    broken.write_text(broken.read_text("utf-8") + "\n| where NoSuchColumn > 1\n", "utf-8")
    out = tmp / "r.html"
    with contextlib.redirect_stdout(io.StringIO()) as said:
        assert cli.main(["report", str(sink_files / "records.jsonl"),
                         str(sink_files / "heartbeats.jsonl"), "--now", _now(fleet),
                         "--out", str(out), "--dashboards", str(dash)]) == 0
    return out.read_text("utf-8"), said.getvalue()


@pytest.mark.e2e
def test_without_an_arg_file_the_section_says_so(failing_panels):
    page, said = failing_panels
    assert "no file given (--arg-file)" in page
    panel = page.split('data-item="platform-events"', 1)[0].rsplit("<section", 1)[1]
    assert 'class="panel failed"' in panel
    assert "queries without result, marked in the page" in said


def test_a_missing_source_is_one_line_and_exit_2(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no such file" in err
    assert not (tmp_path / "r.html").exists()


def test_an_empty_source_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("", "utf-8")
    assert cli.main(["report", str(tmp_path / "empty.jsonl"), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no rows" in err


@pytest.mark.parametrize("module", ["duckdb_kql", "matplotlib"])
def test_without_the_report_extra_it_says_what_to_install(module, tmp_path, monkeypatch, capsys):
    (tmp_path / "records.jsonl").write_text("{}\n", "utf-8")
    monkeypatch.setitem(sys.modules, module, None)  # what `import` sees when it is not installed
    assert cli.main(["report", str(tmp_path), "--out", str(tmp_path / "r.html")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and module in err and "se-forwarder[report]" in err
    assert not (tmp_path / "r.html").exists()


def test_report_errors_are_the_projects_errors():
    from se_forwarder.errors import ReportError
    from se_forwarder.report import argrows, build, merge, sources

    for cls in (sources.SourceError, argrows.ArgFileError, build.DashboardsMissing, merge.MergeError):
        assert issubclass(cls, ReportError), cls


def test_a_directory_without_rows_is_exit_2(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path), "--out", str(tmp_path / "r.html")]) == 2
    assert "holds neither" in capsys.readouterr().err


@pytest.mark.e2e
def test_malformed_rows_are_counted_and_skipped(fleet, tmp_path, capsys):
    lines = [json.dumps({"stream": "Custom-ScheduledEvents", "record": r}) for r in fleet.records[:300]]
    lines += ["not json", "[1, 2]", json.dumps({"stream": "Custom-Nope", "record": {}}),
              json.dumps({"stream": "Custom-ScheduledEvents", "record": {"Phase": "Started"}}),
              json.dumps({"stream": "Custom-ScheduledEvents",
                          "record": {**fleet.records[0], "DurationInSeconds": "long"}})]
    lines += [json.dumps({"stream": "Custom-ScheduledEventsAgent", "record": r})
              for r in fleet.heartbeats[:500]]
    src = tmp_path / "log-analytics.jsonl"
    src.write_text("\n".join(lines) + "\n", "utf-8")
    out = tmp_path / "r.html"
    assert cli.main(["report", str(tmp_path), "--out", str(out)]) == 0
    assert "5 malformed lines skipped" in capsys.readouterr().out
    assert "5 malformed source lines were skipped" in out.read_text("utf-8")


@pytest.mark.e2e
def test_a_failing_query_is_a_marked_panel_and_the_rest_is_written(failing_panels):
    page, _ = failing_panels
    panel = page.split('data-item="many-vms"', 1)[1].split("</section>", 1)[0]
    assert "No result." in panel and "NoSuchColumn" in panel
    assert page.split('data-item="many-vms"', 1)[0].rsplit("<section", 1)[1].startswith(
        ' class="panel failed"')
    assert 'data-metric="Events"' in page and 'data-item="hook-failures"' in page


def test_no_workbooks_where_pointed_is_exit_2(tmp_path, capsys):
    (tmp_path / "r.jsonl").write_text("{}\n", "utf-8")
    assert cli.main(["report", str(tmp_path / "r.jsonl"), "--dashboards", str(tmp_path)]) == 2
    assert "no workbooks in" in capsys.readouterr().err


def test_arg_rows_as_a_bare_list_with_a_malformed_row(fleet, tmp_path):
    from se_forwarder.report import argrows

    rows = argfleet.platform_rows(fleet, lonely_vms=1)[-1:]
    path = argfleet.write(tmp_path / "a.json", [*rows, {"no": "type"}, 7], bare=True)
    got = argrows.read(path)
    assert (len(got.rows), got.skipped) == (1, 2)


def test_a_bad_arg_file_is_exit_2(sink_files, tmp_path, capsys):
    bad = tmp_path / "arg.json"
    bad.write_text('{"count": 1, "data": 3}', "utf-8")
    assert cli.main(["report", str(sink_files), "--arg-file", str(bad),
                     "--out", str(tmp_path / "r.html")]) == 2
    assert "az graph query" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["timechart", "barchart", "areachart"])
def test_a_chart_of_one_moment_draws_a_dated_axis_without_warnings(kind):
    """A short run (the demo's minute of records) puts every row in one bin: the time axis
    still gets a span and ticks, and matplotlib prints nothing on the terminal."""
    at = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = charts.svg(kind, [{"t": at, "n": 3}], {"xAxis": "t", "yAxis": ["n"]})
    assert out.startswith("<svg") and "12:00" in out
    # the lone value is drawn: a dot on the line, a bar of its height for bars and areas
    from matplotlib import pyplot as plt  # the report extra; svg() above chose the Agg backend

    fig, ax = plt.subplots()
    try:
        charts._series_chart(ax, kind, [{"t": at, "n": 3}], {"xAxis": "t", "yAxis": ["n"]})
        if kind == "timechart":
            assert [line.get_marker() for line in ax.lines] == ["o"]
        else:
            assert [p.get_height() for p in ax.patches] == [3.0]
    finally:
        plt.close(fig)
