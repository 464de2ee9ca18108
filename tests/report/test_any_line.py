"""``report`` takes any line: one that cannot be read is a skipped line, never the end of the
report (50,000 ``[`` within the first 1,000 lines raised RecursionError in the table sampler; a
row without a time raised TypeError in a chart's bar width; a deeply nested ``--arg-file``
raised RecursionError)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from se_forwarder.report.kql.tables import sample
from se_forwarder.report.render.charts import series, svg
from se_forwarder.report.workbooks.argrows import ArgFileError, read

RECORD = {"TimeGenerated": "2026-03-01T10:00:00.000Z", "RecordId": "a", "Phase": "FirstSeen"}


def test_the_sampler_skips_a_line_nested_past_the_recursion_limit(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text("[" * 50_000 + "\n" + json.dumps(RECORD) + "\n")
    assert sample(path) == (False, {"records"})


@pytest.mark.parametrize("kind", ["barchart", "timechart", "areachart", "linechart"])
def test_a_chart_leaves_out_rows_without_a_time(kind):
    at = [datetime(2026, 3, 1, h, tzinfo=UTC) for h in (10, 11)]
    rows = [{"t": at[0], "n": 1}, {"t": None, "n": 5}, {"t": at[1], "n": 3}]
    picture = svg(kind, rows, {"xAxis": "t", "yAxis": ["n"]})
    assert "<svg" in picture
    assert series(rows, {"xAxis": "t", "yAxis": ["n"]})["n"] == {at[0]: 1.0, None: 5.0, at[1]: 3.0}


def test_a_deeply_nested_arg_file_is_one_line_not_a_traceback(tmp_path):
    path = tmp_path / "arg.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ArgFileError, match="nested too deeply") as caught:
        read(path)
    assert "\n" not in str(caught.value)
