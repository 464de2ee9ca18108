"""A workbook chart item drawn with matplotlib as inline SVG (text kept as text).

matplotlib, not a JavaScript library: a static SVG per chart keeps the page light (tens of kB,
no script), opens with no network access, and matplotlib is the most widely kept Python
plotting library.

The item's ``chartSettings`` decide the chart as in the portal: ``xAxis``, ``yAxis`` (one or more
series), ``group`` (one series per value of that column), ``seriesLabelSettings`` (label and
colour per series). Visualizations: ``barchart`` (stacked when grouped), ``timechart``,
``areachart`` (stacked), ``piechart``.
"""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

from .colors import color
from .values import number, order_key, order_labels

MAX_LABEL = 40  # characters of a category or series label drawn (a value may be far longer)

WIDTH, HEIGHT = 7.2, 2.5  # inches, at 96 dpi in the page
CHARTS = {"barchart", "timechart", "areachart", "linechart", "piechart"}


def svg(visualization: str, rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> str:
    """The chart as an ``<svg>`` element (no XML prolog)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots(figsize=(WIDTH, HEIGHT))
        try:
            if visualization == "piechart":
                _pie(ax, rows)
            else:
                _series_chart(ax, visualization, rows, settings)
            fig.tight_layout(pad=0.4)
            buf = io.StringIO()
            fig.savefig(buf, format="svg", metadata={"Date": None})
        finally:
            plt.close(fig)
    text = buf.getvalue()
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.DOTALL)  # RDF boilerplate
    return text[text.index("<svg") :]


# text.parse_math off: a value is drawn as written, never as mathtext ("$^^^$" would not draw)
_STYLE: dict[RcKeyType, Any] = {
    "text.parse_math": False,
    "text.usetex": False,
    "svg.fonttype": "none",
    "font.size": 9,
    "font.family": "sans-serif",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": "#8a8886",
    "axes.grid": True,
    "axes.grid.axis": "y",
    "grid.color": "#e1dfdd",
    "grid.linewidth": 0.6,
    "legend.frameon": False,
    "legend.fontsize": 8,
    "xtick.color": "#484644",
    "ytick.color": "#484644",
    "svg.hashsalt": "se-forwarder",
}


def series(
    rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]
) -> dict[str, dict[Any, float]]:
    """{series name: {x: y}}: one per value of ``group`` (its first y column), else one per y
    column. The report's tests read the same numbers from here."""
    x, ys, group = settings.get("xAxis"), list(settings.get("yAxis") or []), settings.get("group")
    if rows and (x is None or not ys):
        x = x or next(iter(rows[0]))
        ys = ys or [k for k, v in rows[0].items() if k != x and number(v)]
    out: dict[str, dict[Any, float]] = {}
    for r in rows:
        names = [(str(r.get(group)), ys[0])] if group else [(y, y) for y in ys]
        for name, y in names:
            value = r.get(y)
            if number(value):
                s = out.setdefault(name, {})
                at = r.get(x) if x is not None else None
                s[at] = s.get(at, 0.0) + float(value)
    return out


def _series_chart(
    ax: Any, kind: str, rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]
) -> None:
    data = series(rows, settings)
    labels = {s["seriesName"]: s for s in settings.get("seriesLabelSettings", [])}
    xs = sorted({x for s in data.values() for x in s}, key=order_key)
    timeline = any(isinstance(x, datetime) for x in xs)
    if timeline:  # a row without a time has no place on a time axis: left out
        xs = [x for x in xs if isinstance(x, datetime)]
        data = {n: {x: y for x, y in s.items() if isinstance(x, datetime)} for n, s in data.items()}
    width = _bar_width(xs) if timeline else 0.8
    if timeline:  # every bin between the first and the last: an empty bin is 0, not a line
        xs = _every_bin(xs)  # drawn across it (the series cross where nothing happened)
    pos: list[Any] = xs if timeline else list(range(len(xs)))
    bottom = [0.0] * len(xs)
    stacked = bool(settings.get("group")) or len(data) == 1
    if kind == "areachart" and len(xs) == 1:  # an area over one moment has no width: stack bars
        kind, stacked = "barchart", True
    names = order_labels(data)
    for i, (name, points) in enumerate(sorted(data.items(), key=lambda kv: _order(kv[0], labels))):
        ys = [points.get(x, 0.0) for x in xs]
        style = labels.get(name, {})
        kw = {
            "label": label(style.get("label") or names.get(name, name)),
            "color": color(style.get("color"), i),
        }
        if kind == "barchart":
            if stacked:
                ax.bar(pos, ys, width, bottom=bottom, **kw)
                bottom = [b + y for b, y in zip(bottom, ys, strict=True)]
            else:
                step = width / len(data)
                ax.bar(
                    [p + (i - (len(data) - 1) / 2) * step for p in pos] if not timeline else pos,
                    ys,
                    step,
                    **kw,
                )
        elif kind == "areachart":
            ax.fill_between(
                pos,
                bottom,
                [b + y for b, y in zip(bottom, ys, strict=True)],
                alpha=0.85,
                linewidth=0,
                **kw,
            )
            bottom = [b + y for b, y in zip(bottom, ys, strict=True)]
        else:  # a lone point gets a dot: a line alone draws nothing
            ax.plot(pos, ys, linewidth=1.4, marker="o" if len(xs) == 1 else None, **kw)
    _axes(ax, xs, pos, timeline, len(data), settings)
    if xs and not any(y for s in data.values() for y in s.values()):
        ax.set_ylim(0, 1)  # every value 0: a count axis of 0 and 1, not 0.00 to 0.05


def _axes(
    ax: Any, xs: list[Any], pos: list[Any], timeline: bool, n: int, settings: Mapping[str, Any]
) -> None:
    if not timeline:
        names = order_labels(xs)
        ax.set_xticks(
            pos, [label(names.get(x, x)) for x in xs], rotation=0 if len(xs) <= 12 else 45
        )
        ax.set_xlabel(settings.get("xAxis") or "")
    else:
        import matplotlib.dates as mdates

        if len(xs) == 1:  # one moment: give the axis a span (a zero-width one has no ticks)
            ax.set_xlim(xs[0] - timedelta(hours=1), xs[0] + timedelta(hours=1))
        # minticks 3, not 5: with 5, spans of 3.5 to 5 minutes (or hours) fall between the finer
        # unit's largest step and the coarser unit's fewest ticks, and matplotlib warns on the
        # terminal and picks a step of its own. matplotlib.dates leaves these unannotated.
        locator = mdates.AutoDateLocator(minticks=3, maxticks=8)  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(
            mdates.ConciseDateFormatter(locator)  # type: ignore[no-untyped-call]
        )
    ax.set_ylim(bottom=0)
    ax.yaxis.get_major_locator().set_params(integer=True)
    if n > 1 or settings.get("group"):
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), ncols=1 if n <= 12 else 2)
    if not xs:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)


def _pie(ax: Any, rows: Sequence[Mapping[str, Any]]) -> None:
    if not rows:
        return
    name = next((k for k, v in rows[0].items() if isinstance(v, str)), None)
    value = next((k for k, v in rows[0].items() if number(v)), None)
    pairs = [
        (str(r.get(name) if name is not None else None), float(r.get(value) or 0))
        for r in rows
        if value is not None
    ]
    ax.pie(
        [v for _, v in pairs],
        labels=[label(f"{k} ({v:g})") for k, v in pairs],
        colors=[color(None, i) for i in range(len(pairs))],
        startangle=90,
        counterclock=False,
        wedgeprops={"linewidth": 1, "edgecolor": "white"},
    )
    ax.set_aspect("equal")
    ax.grid(False)


def _every_bin(xs: list[datetime], most: int = 2000) -> list[datetime]:
    """``xs`` with the bins between them, at the smallest step between two of them (the query's
    grain): at most ``most`` points, else ``xs`` as they are."""
    gaps = [b - a for a, b in itertools.pairwise(xs) if b > a]
    if not gaps:
        return xs
    step = min(gaps)
    if (xs[-1] - xs[0]) / step >= most:
        return xs
    filled = {xs[0] + k * step for k in range(int((xs[-1] - xs[0]) / step) + 1)}
    return sorted(filled | set(xs))


def _bar_width(xs: list[datetime]) -> timedelta:
    gaps = [b - a for a, b in itertools.pairwise(xs) if b > a]
    return (min(gaps) if gaps else timedelta(hours=1)) * 0.8


def _order(name: str, labels: Mapping[str, Any]) -> tuple[int, str]:
    keys = list(labels)
    return (keys.index(name) if name in keys else len(keys), name)


def label(x: Any) -> str:
    """A category or series as drawn: "(none)" for nothing, cut at ``MAX_LABEL`` characters, and
    never starting with "_" (matplotlib leaves such labels out of the legend)."""
    text = "(none)" if x in (None, "") else str(x)
    text = text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"
    return "\u200b" + text if text.startswith("_") else text
