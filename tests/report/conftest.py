"""The reports the report tests read, each built once per test run (helpers/once.py): the known
fleet with Azure's own record (``--arg-file``) and one query broken on purpose, quiet (``full``);
the same fleet plus issue 18's hostile lines without ``--arg-file``, with progress on stderr
(``plain``); each page opened in Chromium (``shown``). A full build takes tens of seconds: the
tests are split over test_report.py and test_report_hostile.py, which a parallel run hands to two
workers, and the first worker that needs a build makes it while the other makes the other."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import argfleet, chromium
from helpers.once import known_fleet, once, once_value
from helpers.reportrun import Report, hostile, now_of, report, write_sink

from se_forwarder import cli


@pytest.fixture(scope="session")
def fleet(tmp_path_factory):
    return known_fleet(tmp_path_factory)


@pytest.fixture(scope="session")
def sink_files(fleet, tmp_path_factory) -> Path:
    """The fleet as the file sink writes it (records.jsonl, heartbeats.jsonl)."""
    return once(
        tmp_path_factory, "report-sink", lambda d: write_sink(d, fleet.records, fleet.heartbeats)
    )


def _plain(fleet, folder: Path) -> Report:
    lines, kept = hostile(fleet)
    write_sink(
        folder, [*fleet.records, *kept, *(line for line, _ in lines.values())], fleet.heartbeats
    )
    return report([str(folder), "--now", now_of(fleet)], folder / "report.html")


@pytest.fixture(scope="session")
def plain(fleet, tmp_path_factory) -> Report:
    """The fleet plus the hostile lines, no --arg-file, progress on (non-terminal) stderr."""
    return once_value(tmp_path_factory, "report-plain", lambda d: _plain(fleet, d))


def _full(fleet, sink_files: Path, tmp: Path) -> Report:
    arg = argfleet.write(tmp / "arg.json", argfleet.platform_rows(fleet))
    dash = tmp / "dashboards"
    shutil.copytree(Path(cli.__file__).resolve().parents[2] / "dashboards", dash)
    broken = dash / "queries" / "workbook" / "scheduled-events" / "many-vms.kql"
    broken.write_text(broken.read_text("utf-8") + "\n| where NoSuchColumn > 1\n", "utf-8")
    return report(
        [
            str(sink_files),
            "--now",
            now_of(fleet),
            "--arg-file",
            str(arg),
            "--dashboards",
            str(dash),
            "-q",
        ],
        tmp / "report.html",
    )


@pytest.fixture(scope="session")
def full(fleet, sink_files, tmp_path_factory) -> Report:
    """The known fleet with Azure's own record, one query broken on purpose, quiet."""
    return once_value(tmp_path_factory, "report-full", lambda d: _full(fleet, sink_files, d))


class Shown:
    """Each page in Chromium (screenshot, DOM, layout probe), opened when a test first asks."""

    def __init__(self, request: pytest.FixtureRequest, factory: pytest.TempPathFactory) -> None:
        self._request, self._factory = request, factory
        self._seen: dict[str, chromium.Rendered] = {}

    def __getitem__(self, name: str) -> chromium.Rendered:
        if name not in self._seen:
            page: Report = self._request.getfixturevalue(name)  # "plain" or "full"
            self._seen[name] = once_value(
                self._factory,
                f"report-chromium-{name}",
                lambda d: chromium.open_page(page.out, d / f"{name}.png"),
            )
        return self._seen[name]


@pytest.fixture(scope="session")
def shown(request, tmp_path_factory) -> Shown:
    return Shown(request, tmp_path_factory)
