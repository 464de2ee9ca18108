"""``se-forwarder report`` on the known fleet plus issue 18's hostile lines, without
``--arg-file`` (``plain``, built once per test run: tests/report/conftest.py): every hostile line
is counted and skipped and the report is still written; what people read has no raw codes."""

from __future__ import annotations

import re

import pytest
from helpers.reportrun import hostile, item

from se_forwarder.report.kql import load


@pytest.mark.e2e
def test_without_an_arg_file_the_page_says_so_once_not_as_failures(plain):
    page = plain.page
    assert plain.rc == 0
    assert "no file given (--arg-file)" in page
    assert page.count('data-warn="needs-arg"') == 1
    for name in ("platform-events", "coverage-gaps", "arg-vms"):
        assert f'data-item="{name}"' not in page  # no failed panel, only the line that says so
    omitted = re.findall(r'data-needs-arg="([^"]*)"', page)
    assert omitted == [
        "platform-events platform-vs-agents coverage-gaps unknown-resolved",
        "never-reported never-reported-scale-set-vms",
    ]
    assert 'data-warn="failed"' not in page
    assert "6 panels compare with Azure Resource Graph and were left out" in plain.stdout


@pytest.mark.e2e
@pytest.mark.parametrize(
    "case",
    [
        "ingestion time not a time",
        "basic ISO 8601 time",
        "ISO week date",
        "FaultDomain 10^30",
        "Polls past 64 bits",
        "not JSON",
    ],
)
def test_a_hostile_line_is_counted_and_skipped_and_the_report_is_written(case, fleet, plain):
    """Each line made the report end in a traceback with no HTML (issue 18)."""
    lines, _ = hostile(fleet)
    reason = lines[case][1]
    expected = sum(1 for _, why in lines.values() if why == reason)
    assert plain.rc == 0
    terminal = re.findall(r"(\d+) × ([^;\n]+)", plain.stdout)  # noqa: RUF001 - as printed
    assert sum(int(n) for n, why in terminal if why.startswith(reason)) == expected
    warn = plain.page.split('data-warn="skipped"', 1)[1].split("</p>", 1)[0]
    assert f"{len(lines)} malformed source lines were skipped" in warn
    assert re.search(rf"{expected} × {re.escape(reason)}", warn)  # noqa: RUF001 - as printed


@pytest.mark.e2e
def test_a_zone_in_matplotlibs_math_syntax_is_drawn_as_written(plain):
    """``$^^^$`` is mathtext to matplotlib: the chart raised and the report ended."""
    chart = item(plain.page, "by-zone")
    assert "<svg" in chart and "$^^^$" in chart


@pytest.mark.e2e
def test_a_value_over_16_mb_is_cut_to_what_the_agent_sends(plain):
    assert plain.out.stat().st_size < 5_000_000 and "x" * (load.MAX_TEXT + 1) not in plain.page
    assert re.search(
        r"records.jsonl: 1 value\(s\) longer than the agent sends cut to "
        rf"{load.MAX_TEXT:,} characters",
        plain.stdout,
    )


@pytest.mark.e2e
def test_what_people_read_has_no_raw_codes_or_empty_sections(plain, shown):
    dom = shown["plain"].dom
    # durations: -1 is "unknown" as served; categories: no "3:" ordering prefixes
    durations = []
    for table in re.findall(r"<table>.*?</table>", dom, flags=re.DOTALL):
        heads = [re.sub(r"<[^>]+>", "", h) for h in re.findall(r"<th[^>]*>(.*?)</th>", table)]
        rows = [
            re.findall(r"<td[^>]*>(.*?)</td>", tr)
            for tr in re.findall(r"<tr>(.*?)</tr>", table, re.DOTALL)
        ]
        durations += [
            row[i]
            for i, head in enumerate(heads)
            if "Duration" in head
            for row in rows
            if len(row) == len(heads)
        ]
    assert durations and "-1" not in durations and "unknown" in durations
    assert not re.search(r">\d+: [^<]+</text>", dom) and "within 1 min" in dom
    # every section heading has something under it; the drill-down is there and linked
    for section in re.findall(
        r'<div class="section".*?(?=<div class="section"|</article>)', dom, flags=re.DOTALL
    ):
        assert "<h2>" not in section or 'class="panel' in section or 'class="note' in section
    drills = re.findall(r'<details id="([^"]+)"', dom)
    links = set(re.findall(r'<a href="#(drilldown-records-[^"]+)"', dom))
    assert drills and links and links <= set(drills)
    assert "Every record of the event" in dom
