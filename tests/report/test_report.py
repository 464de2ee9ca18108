"""``se-forwarder report``: the fleet view of a known fleet rendered, opened in headless Chromium
(screenshot kept under the test's tmp dir), and its key numbers read from the rendered page
against the same numbers computed in Python; what a person reads checked in the rendered layout;
every kind of bad input, issue 18's hostile lines among them.

Two reports are built once for the module (a full build takes most of this module's time): the
known fleet with Azure's own record (``--arg-file``) and one query broken on purpose, quiet; and
the same fleet plus hostile lines without ``--arg-file``, with progress on stderr.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import sys
import uuid
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers import argfleet, chromium
from helpers import fleetview as fv
from helpers.fleetrun import item_span

from se_forwarder import cli
from se_forwarder.report import charts, load
from se_forwarder.timefmt import format_ms
from se_forwarder_testbed.fleet import FleetSpec, generate

BIG = 17 * 1024 * 1024  # over DuckDB's old 16 MB object limit


@dataclass(slots=True)
class Report:
    rc: int
    out: Path
    stdout: str
    stderr: str

    @property
    def page(self) -> str:
        return self.out.read_text("utf-8")


def _report(argv: list[str], out: Path) -> Report:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = cli.main(["report", *argv, "--out", str(out)])
    return Report(rc, out, stdout.getvalue(), stderr.getvalue())


@pytest.fixture(scope="module")
def fleet():
    return generate(FleetSpec())


def _now(fleet) -> str:
    return format_ms(fleet.truth.end)


def _write_sink(folder: Path, records: list, heartbeats: list) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("records.jsonl", records), ("heartbeats.jsonl", heartbeats)):
        (folder / name).write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                                           for r in rows), "utf-8")
    return folder


@pytest.fixture(scope="module")
def sink_files(fleet, tmp_path_factory) -> Path:
    """The fleet as the file sink writes it (records.jsonl, heartbeats.jsonl)."""
    return _write_sink(tmp_path_factory.mktemp("sink"), fleet.records, fleet.heartbeats)


def _recent(fleet) -> dict:
    """The fleet's latest record of an event that hit its VM (shown by every time range)."""
    return max((r for r in fleet.records if r["AffectsThisVm"] and r["Phase"] == "FirstSeen"),
               key=lambda r: r["TimeGenerated"])


def _hostile(fleet) -> tuple[dict[str, tuple[str, str]], list]:
    """Issue 18's hostile lines: {case: (line, reason it is skipped)}, and two valid but hostile
    rows that are kept (a mathtext Zone, a value over 16 MB)."""
    rec, beat = fleet.records[0], fleet.heartbeats[-1]
    skipped = {
        "ingestion time not a time": ({**rec, "_IngestionTime": "yesterday"},
                                      "_IngestionTime: not a time"),
        "basic ISO 8601 time": ({**rec, "TimeGenerated": "20260301T100000"},
                                "TimeGenerated: not a time"),
        "ISO week date": ({**rec, "TimeGenerated": "2026-W09-1"}, "TimeGenerated: not a time"),
        "FaultDomain 10^30": ({**rec, "FaultDomain": 10**30}, "FaultDomain: not a 32-bit"),
        "Polls past 64 bits": ({**beat, "Polls": 2**64}, "Polls: not a 64-bit"),
        "not JSON": ("not json", load.NO_TABLE),
    }
    lines = {k: (v if isinstance(v, str) else json.dumps(v), why) for k, (v, why) in skipped.items()}
    event = str(uuid.UUID(int=18)).upper()
    mathtext = {**_recent(fleet), "Zone": "$^^^$", "EventId": event, "RecordId": event.lower()}
    big = {**_recent(fleet), "Description": "x" * BIG, "RecordId": str(uuid.UUID(int=19))}
    return lines, [mathtext, big]


@pytest.fixture(scope="module")
def plain(fleet, tmp_path_factory) -> Report:
    """The fleet plus the hostile lines, no --arg-file, progress on (non-terminal) stderr."""
    lines, kept = _hostile(fleet)
    folder = _write_sink(tmp_path_factory.mktemp("hostile"),
                         [*fleet.records, *kept, *(line for line, _ in lines.values())],
                         fleet.heartbeats)
    return _report([str(folder), "--now", _now(fleet)], folder / "report.html")


@pytest.fixture(scope="module")
def full(fleet, sink_files, tmp_path_factory) -> Report:
    """The known fleet with Azure's own record, one query broken on purpose, quiet."""
    tmp = tmp_path_factory.mktemp("full")
    arg = argfleet.write(tmp / "arg.json", argfleet.platform_rows(fleet))
    dash = tmp / "dashboards"
    shutil.copytree(Path(cli.__file__).resolve().parents[2] / "dashboards", dash)
    broken = dash / "queries" / "workbook" / "scheduled-events" / "many-vms.kql"
    broken.write_text(broken.read_text("utf-8") + "\n| where NoSuchColumn > 1\n", "utf-8")
    return _report([str(sink_files), "--now", _now(fleet), "--arg-file", str(arg),
                    "--dashboards", str(dash), "-q"], tmp / "report.html")


@pytest.fixture(scope="module")
def shown(plain, full, tmp_path_factory) -> dict[str, chromium.Rendered]:
    """Both pages in Chromium: screenshot, DOM, layout probe."""
    tmp = tmp_path_factory.mktemp("chromium")
    return {name: chromium.open_page(r.out, tmp / f"{name}.png")
            for name, r in (("plain", plain), ("full", full))}


def tiles(dom: str, article: str) -> dict[str, str]:
    """Tile title -> the number shown, inside one workbook's part of the page."""
    part = dom.split(f'<article id="{article}"', 1)[1].split("</article>", 1)[0]
    return dict(re.findall(r'data-metric="([^"]+)"><div class="tile-value">([^<]*)</div>', part))


def _item(page: str, name: str) -> str:
    """The HTML of one item's panel."""
    return page.split(f'data-item="{name}"', 1)[1].split("</section>", 1)[0]


@pytest.mark.external
@pytest.mark.e2e
def test_the_report_of_a_known_fleet_shows_its_numbers_in_chromium(fleet, full, shown):
    assert full.rc == 0
    assert not re.search(r'(src|href)="https?:|url\(https?:|<script|<link|@import', full.page)
    dom = shown["full"].dom
    now = fv.ts(_now(fleet))
    records = fv.visible(fleet.records, now, item_span("scheduled-events", "range-tiles"))
    ev = fv.events(records)
    shown_tiles = tiles(dom, "scheduled-events")
    assert shown_tiles["Events"] == str(len(ev))
    assert shown_tiles["Started"] == str(sum(1 for e in ev.values() if e.started))
    assert shown_tiles["Outcome unknown"] == str(sum(1 for e in ev.values()
                                                     if e.removed and not e.started and not e.cancelled))
    span = item_span("agent-health", "fleet")
    status = fv.agent_status(fv.visible(fleet.records, now, span),
                             fv.visible(fleet.heartbeats, now, span), now)
    agents = tiles(dom, "agent-health")
    assert agents["Agents reporting"] == str(sum(1 for s in status.values() if s in ("ok", "degraded")))
    assert agents["Silent"] == str(sum(1 for s in status.values() if s == "silent"))
    # Azure's own record: every VM with no agent is listed among the coverage gaps
    gaps = _item(dom, "coverage-gaps")
    assert all(f"no-agent-vm-{k}" in gaps for k in range(3))
    assert 'data-warn="needs-arg"' not in dom


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
def test_a_failing_query_is_a_marked_panel_and_the_rest_is_written(full):
    page = full.page
    panel = _item(page, "many-vms")
    assert "No result." in panel and "NoSuchColumn" in panel
    assert page.split('data-item="many-vms"', 1)[0].rsplit("<section", 1)[1].startswith(
        ' class="panel failed"')
    assert 'data-metric="Events"' in page and 'data-item="hook-failures"' in page
    failed = re.search(r"(\d+) panels without result, marked in the page", full.stdout)
    assert failed and int(failed[1]) == page.count('class="panel failed"') >= 1
    assert 'href="#many-vms"' in page.split('data-warn="failed"', 1)[1].split("</p>", 1)[0]


@pytest.mark.e2e
def test_progress_goes_to_stderr_and_quiet_silences_it(plain, full):
    stages = [line.split("] ", 1)[1] for line in plain.stderr.splitlines()]
    assert stages[0].startswith("loading ") and stages[-1] == "drawing the page"
    assert "running the queries of Azure Scheduled Events: fleet view" in stages
    assert full.stderr == ""
    assert "Report:" in plain.stdout and "loading" not in plain.stdout


@pytest.mark.e2e
def test_without_an_arg_file_the_page_says_so_once_not_as_failures(plain):
    page = plain.page
    assert plain.rc == 0
    assert "no file given (--arg-file)" in page
    assert page.count('data-warn="needs-arg"') == 1
    for name in ("platform-events", "coverage-gaps", "arg-vms"):
        assert f'data-item="{name}"' not in page  # no failed panel, only the line that says so
    omitted = re.findall(r'data-needs-arg="([^"]*)"', page)
    assert omitted == ["platform-events platform-vs-agents coverage-gaps unknown-resolved",
                       "never-reported never-reported-scale-set-vms"]
    assert 'data-warn="failed"' not in page
    assert "6 panels compare with Azure Resource Graph and were left out" in plain.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("case", ["ingestion time not a time", "basic ISO 8601 time",
                                  "ISO week date", "FaultDomain 10^30", "Polls past 64 bits",
                                  "not JSON"])
def test_a_hostile_line_is_counted_and_skipped_and_the_report_is_written(case, fleet, plain):
    """Each line made the report end in a traceback with no HTML (issue 18)."""
    lines, _ = _hostile(fleet)
    reason = lines[case][1]
    expected = sum(1 for _, why in lines.values() if why == reason)
    assert plain.rc == 0
    terminal = re.findall(r"(\d+) × ([^;\n]+)", plain.stdout)
    assert sum(int(n) for n, why in terminal if why.startswith(reason)) == expected
    warn = plain.page.split('data-warn="skipped"', 1)[1].split("</p>", 1)[0]
    assert f"{len(lines)} malformed source lines were skipped" in warn
    assert re.search(rf"{expected} × {re.escape(reason)}", warn)


@pytest.mark.e2e
def test_a_zone_in_matplotlibs_math_syntax_is_drawn_as_written(plain):
    """``$^^^$`` is mathtext to matplotlib: the chart raised and the report ended."""
    chart = _item(plain.page, "by-zone")
    assert "<svg" in chart and "$^^^$" in chart


@pytest.mark.e2e
def test_a_value_over_16_mb_is_cut_to_what_the_agent_sends(plain):
    assert plain.out.stat().st_size < 5_000_000 and "x" * (load.MAX_TEXT + 1) not in plain.page
    assert re.search(r"records.jsonl: 1 value\(s\) longer than the agent sends cut to "
                     rf"{load.MAX_TEXT:,} characters", plain.stdout)


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["plain", "full"])
def test_what_people_read_is_laid_out_for_reading(name, shown):
    """Rendered in Chromium at 1400 px: no narrow column wraps ("Platfor m"), numbers and their
    headers are right-aligned, long text sits under its row within its panel, neither the page
    nor a table scrolls sideways, and the screenshot is a page, not a blank."""
    got = shown[name]
    assert got.probe["cells"] > 300, got.probe
    assert got.probe["wrapped"] == [] and got.probe["numLeft"] == [], got.probe
    assert got.probe["belowOut"] == [] and got.probe["overflow"] is False, got.probe
    assert got.probe["sideways"] == [], got.probe  # no table read by scrolling (the agents' 22 columns did)
    assert chromium.colours(got.png) > 50


@pytest.mark.e2e
def test_what_people_read_has_no_raw_codes_or_empty_sections(plain, shown):
    dom = shown["plain"].dom
    # durations: -1 is "unknown" as served; categories: no "3:" ordering prefixes
    durations = []
    for table in re.findall(r"<table>.*?</table>", dom, flags=re.DOTALL):
        heads = [re.sub(r"<[^>]+>", "", h) for h in re.findall(r"<th[^>]*>(.*?)</th>", table)]
        rows = [re.findall(r"<td[^>]*>(.*?)</td>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", table, re.DOTALL)]
        durations += [row[i] for i, head in enumerate(heads) if "Duration" in head
                      for row in rows if len(row) == len(heads)]
    assert durations and "-1" not in durations and "unknown" in durations
    assert not re.search(r">\d+: [^<]+</text>", dom) and "within 1 min" in dom
    # every section heading has something under it; the drill-down is there and linked
    for section in re.findall(r'<div class="section".*?(?=<div class="section"|</article>)', dom,
                              flags=re.DOTALL):
        assert "<h2>" not in section or 'class="panel' in section or 'class="note' in section
    drills = re.findall(r'<details id="([^"]+)"', dom)
    links = set(re.findall(r'<a href="#(drilldown-records-[^"]+)"', dom))
    assert drills and links and links <= set(drills)
    assert "Every record of the event" in dom


def test_a_missing_source_is_one_line_and_exit_2(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no such file" in err
    assert not (tmp_path / "r.html").exists()


def test_an_empty_source_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("", "utf-8")
    assert cli.main(["report", str(tmp_path / "empty.jsonl"), "--out", str(tmp_path / "r.html"),
                     "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no rows" in err


def test_a_source_of_only_malformed_lines_is_exit_2_and_says_how_many(tmp_path, capsys):
    (tmp_path / "bad.jsonl").write_text('not json\n{"TimeGenerated": "2026-W09-1", "Phase": 1}\n')
    assert cli.main(["report", str(tmp_path / "bad.jsonl"), "--out", str(tmp_path / "r.html"),
                     "-q"]) == 2
    assert "no rows" in capsys.readouterr().err and not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("module", ["duckdb_kql", "matplotlib", "jinja2", "markdown_it"])
def test_without_the_report_extra_it_says_what_to_install(module, tmp_path, monkeypatch, capsys):
    (tmp_path / "records.jsonl").write_text("{}\n", "utf-8")
    monkeypatch.setitem(sys.modules, module, None)  # what `import` sees when it is not installed
    assert cli.main(["report", str(tmp_path), "--out", str(tmp_path / "r.html")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and module in err and "se-forwarder[report]" in err
    assert not (tmp_path / "r.html").exists()


def test_a_file_that_cannot_be_read_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "records.jsonl.gz").write_text("{}\n", "utf-8")  # named gzip, is not
    assert cli.main(["report", str(tmp_path / "records.jsonl.gz"), "--out",
                     str(tmp_path / "r.html"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot be read" in err
    assert not (tmp_path / "r.html").exists()


def test_report_errors_are_the_projects_errors():
    from se_forwarder.errors import ReportError
    from se_forwarder.report import argrows, build, merge, sources

    for cls in (sources.SourceError, argrows.ArgFileError, build.DashboardsMissing, merge.MergeError,
                load.LoadError):
        assert issubclass(cls, ReportError), cls


def test_a_directory_without_rows_is_exit_2(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path), "--out", str(tmp_path / "r.html")]) == 2
    assert "holds neither" in capsys.readouterr().err


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


def test_category_labels_lose_their_ordering_prefix_and_keep_their_order():
    rows = [{"Bucket": b, "n": i} for i, b in enumerate(["10: late", "2: early", "1: very early"])]
    out = charts.svg("barchart", rows, {"xAxis": "Bucket", "yAxis": ["n"]})
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", out) or re.findall(r"<!-- (.*?) -->", out)
    labels = [t for t in texts if t in ("very early", "early", "late")]
    assert labels == ["very early", "early", "late"], texts
    assert not re.search(r"\d+: (very early|early|late)", out)


def test_the_workbooks_text_is_markdown_with_no_raw_html_and_no_links_out():
    from se_forwarder.report import text

    html = text.markdown("# Help\n**bold** <b onclick=x>raw</b> [docs](https://example.com) "
                         "![img](http://x/y.png) `code`\n\n- one\n- two")
    assert "<h3>Help</h3>" in html and "<strong>bold</strong>" in html
    assert "&lt;b onclick=x&gt;" in html and "<b " not in html
    assert "href" not in html and "src=" not in html and "docs" in html and "img" in html
    assert "<li>one</li>" in html and "<code>code</code>" in html
