"""``se-forwarder report``: the fleet view of a known fleet rendered, opened in headless Chromium
(screenshot kept under the test's tmp dir), and its key numbers read from the rendered page
against the same numbers computed in Python; what a person reads checked in the rendered layout;
every kind of bad input. Issue 18's hostile lines are test_report_hostile.py's.

The two reports (``full``: the known fleet with Azure's own record and one query broken on
purpose, quiet; ``plain``: the same fleet plus hostile lines without ``--arg-file``, with progress
on stderr) are built once per test run (tests/report/conftest.py).
"""

from __future__ import annotations

import re
import sys
import warnings
from datetime import UTC, datetime, timedelta

import pytest
from helpers import argfleet, chromium
from helpers import fleetview as fv
from helpers.fleetrun import item_span
from helpers.reportrun import item, now_of

from se_forwarder import cli
from se_forwarder.report.kql import load
from se_forwarder.report.render import charts


def tiles(dom: str, article: str) -> dict[str, str]:
    """Tile title -> the number shown, inside one workbook's part of the page."""
    part = dom.split(f'<article id="{article}"', 1)[1].split("</article>", 1)[0]
    return dict(re.findall(r'data-metric="([^"]+)"><div class="tile-value">([^<]*)</div>', part))


@pytest.mark.external
@pytest.mark.e2e
def test_the_report_of_a_known_fleet_shows_its_numbers_in_chromium(fleet, full, shown):
    assert full.rc == 0
    assert not re.search(r'(src|href)="https?:|url\(https?:|<script|<link|@import', full.page)
    dom = shown["full"].dom
    now = fv.ts(now_of(fleet))
    records = fv.visible(fleet.records, now, item_span("scheduled-events", "range-tiles"))
    ev = fv.events(records)
    shown_tiles = tiles(dom, "scheduled-events")
    assert shown_tiles["Events"] == str(len(ev))
    assert shown_tiles["Started"] == str(sum(1 for e in ev.values() if e.started))
    assert shown_tiles["Outcome unknown"] == str(
        sum(1 for e in ev.values() if e.removed and not e.started and not e.cancelled)
    )
    span = item_span("agent-health", "fleet")
    status = fv.agent_status(
        fv.visible(fleet.records, now, span), fv.visible(fleet.heartbeats, now, span), now
    )
    agents = tiles(dom, "agent-health")
    assert agents["Agents reporting"] == str(
        sum(1 for s in status.values() if s in ("ok", "degraded"))
    )
    assert agents["Silent"] == str(sum(1 for s in status.values() if s == "silent"))
    # Azure's own record: every VM with no agent is listed among the coverage gaps
    gaps = item(dom, "coverage-gaps")
    assert all(f"no-agent-vm-{k}" in gaps for k in range(3))
    assert 'data-warn="needs-arg"' not in dom


@pytest.mark.e2e
def test_a_failing_query_is_a_marked_panel_and_the_rest_is_written(full):
    page = full.page
    panel = item(page, "many-vms")
    assert "No result." in panel and "NoSuchColumn" in panel
    assert (
        page.split('data-item="many-vms"', 1)[0]
        .rsplit("<section", 1)[1]
        .startswith(' class="panel failed"')
    )
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
@pytest.mark.parametrize("name", ["plain", "full"])
def test_what_people_read_is_laid_out_for_reading(name, shown):
    """Rendered in Chromium at 1400 px: no narrow column wraps ("Platfor m"), numbers and their
    headers are right-aligned, long text sits under its row within its panel, neither the page
    nor a table scrolls sideways, and the screenshot is a page, not a blank."""
    got = shown[name]
    assert got.probe["cells"] > 300, got.probe
    assert got.probe["wrapped"] == [] and got.probe["numLeft"] == [], got.probe
    assert got.probe["belowOut"] == [] and got.probe["overflow"] is False, got.probe
    assert got.probe["sideways"] == [], (
        got.probe
    )  # no table read by scrolling (the agents' 22 columns did)
    assert chromium.colours(got.png) > 50


def test_a_missing_source_is_one_line_and_exit_2(tmp_path, capsys):
    assert (
        cli.main(["report", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "r.html")]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no such file" in err
    assert not (tmp_path / "r.html").exists()


def test_an_empty_source_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("", "utf-8")
    assert (
        cli.main(["report", str(tmp_path / "empty.jsonl"), "--out", str(tmp_path / "r.html"), "-q"])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no rows" in err


def test_a_source_of_only_malformed_lines_is_exit_2_and_says_how_many(tmp_path, capsys):
    (tmp_path / "bad.jsonl").write_text('not json\n{"TimeGenerated": "2026-W09-1", "Phase": 1}\n')
    assert (
        cli.main(["report", str(tmp_path / "bad.jsonl"), "--out", str(tmp_path / "r.html"), "-q"])
        == 2
    )
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
    assert (
        cli.main(
            ["report", str(tmp_path / "records.jsonl.gz"), "--out", str(tmp_path / "r.html"), "-q"]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot be read" in err
    assert not (tmp_path / "r.html").exists()


def test_report_errors_are_the_projects_errors():
    from se_forwarder.errors import ReportError
    from se_forwarder.report import build, sources
    from se_forwarder.report.workbooks import argrows, merge

    for cls in (
        sources.SourceError,
        argrows.ArgFileError,
        build.DashboardsMissing,
        merge.MergeError,
        load.LoadError,
    ):
        assert issubclass(cls, ReportError), cls


def test_a_directory_without_rows_is_exit_2(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path), "--out", str(tmp_path / "r.html")]) == 2
    assert "holds neither" in capsys.readouterr().err


def test_no_workbooks_where_pointed_is_exit_2(tmp_path, capsys):
    (tmp_path / "r.jsonl").write_text("{}\n", "utf-8")
    assert cli.main(["report", str(tmp_path / "r.jsonl"), "--dashboards", str(tmp_path)]) == 2
    assert "no workbooks in" in capsys.readouterr().err


def test_arg_rows_as_a_bare_list_with_a_malformed_row(fleet, tmp_path):
    from se_forwarder.report.workbooks import argrows

    rows = argfleet.platform_rows(fleet, lonely_vms=1)[-1:]
    path = argfleet.write(tmp_path / "a.json", [*rows, {"no": "type"}, 7], bare=True)
    got = argrows.read(path)
    assert (len(got.rows), got.skipped) == (1, 2)


def test_a_bad_arg_file_is_exit_2(sink_files, tmp_path, capsys):
    bad = tmp_path / "arg.json"
    bad.write_text('{"count": 1, "data": 3}', "utf-8")
    assert (
        cli.main(
            ["report", str(sink_files), "--arg-file", str(bad), "--out", str(tmp_path / "r.html")]
        )
        == 2
    )
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


SPANS = (
    [timedelta(seconds=s) for s in (1, 20, 100, 200, 240, 290)]
    + [timedelta(minutes=m) for m in (4, 10, 40, 200, 230, 290, 1000)]
    + [timedelta(days=d) for d in (2, 4, 10, 40, 200, 1000)]
)


@pytest.mark.parametrize("kind", ["timechart", "barchart"])
def test_a_time_axis_of_any_span_gets_a_few_ticks_and_no_warning(kind):
    """A demo or a short time range spans a few minutes, a month's report weeks: each gets 2 to
    9 dated ticks, and matplotlib prints nothing (spans of 3.5 to 5 minutes once warned)."""
    from matplotlib import pyplot as plt  # the report extra

    start = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    for span in SPANS:
        rows = [{"t": start, "n": 1}, {"t": start + span, "n": 2}]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert charts.svg(kind, rows, {"xAxis": "t", "yAxis": ["n"]}).startswith("<svg")
        fig, ax = plt.subplots()
        try:
            charts._series_chart(ax, kind, rows, {"xAxis": "t", "yAxis": ["n"]})
            lo, hi = ax.get_xlim()
            ticks = [t for t in ax.xaxis.get_majorticklocs() if lo <= t <= hi]
            assert 2 <= len(ticks) <= 9, (span, len(ticks))
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
    from se_forwarder.report.render import text

    html = text.markdown(
        "# Help\n**bold** <b onclick=x>raw</b> [docs](https://example.com) "
        "![img](http://x/y.png) `code`\n\n- one\n- two"
    )
    assert "<h3>Help</h3>" in html and "<strong>bold</strong>" in html
    assert "&lt;b onclick=x&gt;" in html and "<b " not in html
    assert "href" not in html and "src=" not in html and "docs" in html and "img" in html
    assert "<li>one</li>" in html and "<code>code</code>" in html


@pytest.mark.e2e
def test_a_table_absent_by_design_says_what_the_view_cannot_know(full):
    """No collector deployed (no ScheduledEventsPlatform_CL rows) and a Resource Graph file with
    no computeresources or resources rows: those panels say what the view cannot know, never a
    red "No result", and never "every VM runs an agent" (issue 28)."""
    page = full.page
    for name in ("agentless-vms", "verified-outcomes", "announced-vs-done"):
        panel = item(page, name)
        assert "Cannot know." in panel and "se-forwarder collect" in panel, panel
        assert "runs an agent" not in panel and "agrees" not in panel, panel
    for name, table in (
        ("never-reported-scale-set-vms", "computeresources"),
        ("never-reported", "resources"),
    ):
        panel = item(page, name)
        assert "Cannot know." in panel and f"no {table} rows" in panel, panel
        assert "No result." not in panel and "sent a heartbeat" not in panel, panel
    failed = re.search(r"(\d+) panels without result, marked in the page", full.stdout)
    assert failed and int(failed[1]) == page.count('class="panel failed"') == 1  # many-vms
