"""The workbooks' colour names (``representation`` of thresholds, ``color`` of chart series) as
the report's colours: the portal's hues, a little darker where they carry text."""

from __future__ import annotations

NAMED = {
    "redBright": "#d13438",
    "red": "#a4262c",
    "orange": "#ca5010",
    "yellow": "#c19c00",
    "green": "#107c10",
    "greenDark": "#0b6a0b",
    "blue": "#0078d4",
    "lightBlue": "#4f9fe0",
    "purple": "#8764b8",
    "magenta": "#c239b3",
    "turquoise": "#038387",
    "gray": "#8a8886",
    "grey": "#8a8886",
}
CYCLE = [
    "#0078d4",
    "#ca5010",
    "#8764b8",
    "#038387",
    "#c239b3",
    "#107c10",
    "#c19c00",
    "#4f6bed",
    "#a4262c",
    "#8a8886",
]


def color(name: str | None, index: int = 0) -> str:
    """A named colour, or the ``index``-th of a cycle that tells neighbours apart."""
    if name and name in NAMED:
        return NAMED[name]
    return CYCLE[index % len(CYCLE)]
