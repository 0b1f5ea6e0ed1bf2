"""The results history as one static page (`fwbench history page`): each cell's series plotted over date and, when
asked, over a package's versions, with the judge's changes marked and every point's provenance in a table.

The page is OUT/index.html, self-contained: the plots are PNGs (matplotlib, Agg backend) embedded as base64, through
the report's document model (fwbench_aggregator.document), which escapes every string it is given. The series, their
points and their changes are fwbench_aggregator.history_series's (the judge decides every change; this module only
draws and lists them). Plain pandas, NumPy and matplotlib: no framework.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import tempfile
from pathlib import Path, PurePath
from typing import Iterable, Sequence

from fwbench.core.results import started_utc

from fwbench_aggregator import document as d
from fwbench_aggregator import history_series, judge
from fwbench_aggregator.plots import _pyplot, fit_titles

PAGE = "index.html"
# The facts of the machine a row ran on, shown in each point's provenance where the rows carry them.
MACHINE_COLUMNS = ("device_model", "cpu_model", "hostname")
HOLLOW = "#888888"  # points that decide nothing
CHANGE_COLOUR = "#c0392b"
# Marks the page's own script ran (tests/test_history_page.py reads it back from a headless browser's DOM).
RENDERED_ATTRIBUTE = "data-history-page"
_EXTRA_CSS = """
table.history td:nth-child(2), table.history td:nth-child(6), table.history td:nth-child(7) { text-align: left; }
table.history td:first-child, table.provenance td:first-child { white-space: nowrap; }
table.provenance { font-size: 0.85em; }
table.provenance td { vertical-align: top; overflow-wrap: anywhere; }
table.provenance td:last-child { white-space: pre-line; }
h2 { margin-top: 2em; border-top: 1px solid #ddd; padding-top: 0.5em; }
"""
_SCRIPT = f'document.body.setAttribute("{RENDERED_ATTRIBUTE}", "rendered");'


def axes_of(by_values: Iterable[str] = ()) -> list[str]:
    """The page's axes: date first (always), then each version:PACKAGE asked for, once each (SeriesError for a
    --by that names no axis)."""
    axes = [history_series.BY_DATE]
    for by in by_values:
        history_series.parse_by(by)
        if by not in axes:
            axes.append(by)
    return axes


def write_page(frame, out_dir: Path, *, by_values: Sequence[str] = (history_series.BY_DATE,),
               title: str = "fwbench results history", store: Path | str | None = None) -> Path:
    """OUT/index.html for the rows of `frame` (history.query's): one section per cell identity, a plot and a table
    per axis. Returns the page's path."""
    out_dir = Path(out_dir)
    axes = axes_of(by_values)
    built = {by: history_series.build(frame, by) for by in axes}
    cells = built[history_series.BY_DATE]
    doc = d.Document(title)
    source = f"history store {store}: " if store is not None else ""
    doc.add(d.Paragraph(f"{source}{len(frame)} row(s), {len(cells)} cell(s); axes: "
                        + ", ".join(_axis_name(by) for by in axes) + "."),
            d.Paragraph(history_series.rule_line(), "note"),
            d.Paragraph(f"A point is the median ms/step of a cell's quiet processes at one "
                        f"{' or '.join(map(_axis_name, axes))}, in one environment. Filled: it decides (at least "
                        f"{judge.MIN_REPEATS} quiet processes); "
                        f"hollow grey: fewer, it decides nothing; busy-only points are not plotted, only counted. A "
                        "dashed line marks a change the judge found, at the first point after it.", "note"))
    with tempfile.TemporaryDirectory(prefix="fwbench-history-page-") as temp:
        plots = Path(temp)
        shown: dict[tuple[str, int], str] = {}  # (axis, series) -> the section that drew it
        for cell in cells:
            doc.add(d.Heading(cell.label, 2))
            for by in axes:
                series = _same_cell(built[by], cell, by)
                if series is not None and (by, id(series)) in shown:
                    # Cells of a sweep are one series by the swept package's version: drawn once.
                    doc.add(d.Heading(f"by {_axis_name(by)}", 3),
                            d.Paragraph(f"The same series as in the section of {shown[(by, id(series))]} (a sweep's "
                                        f"points, one series by {_axis_name(by)}).", "note"))
                    continue
                shown[(by, id(series))] = cell.label
                doc.add(*_axis_blocks(series, by, plots / f"plot{len(doc.blocks)}.png"))
        # A series on a version axis that belongs to no cell of the date axis still gets its section.
        for by in axes:
            for series in built[by]:
                if (by, id(series)) not in shown:
                    doc.add(d.Heading(series.label, 2), *_axis_blocks(series, by, plots / f"plot{len(doc.blocks)}.png"))
        text = d.to_html(doc)
    text = text.replace("</style>", _EXTRA_CSS + "</style>", 1)
    text = text.replace("</body></html>", f"<script>{_SCRIPT}</script></body></html>", 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    page = out_dir / PAGE
    page.write_text(text, encoding="utf-8")
    return page


def _axis_name(by: str) -> str:
    package = history_series.parse_by(by)
    return "date" if package is None else f"{package} version"


def _same_cell(series: list[history_series.Series], cell: history_series.Series, by: str
               ) -> history_series.Series | None:
    """The series over `by` that the cell's rows belong to: its own identity, or where history_series files a
    cell's rows under another series on that axis (a sweep's rows at versions of the package, under the cell they
    were swept from), that one."""
    identity = history_series.series_identity(cell.identity, history_series.parse_by(by))
    return next((s for s in series if s.identity == identity), None)


def _axis_blocks(series: history_series.Series | None, by: str, png: Path) -> list:
    axis = _axis_name(by)
    blocks: list = [d.Heading(f"by {axis}", 3)]
    if series is None or not series.points:
        left_out = series.left_out if series is not None else 0
        reason = (f"{left_out} ok row(s), none of which records {axis.removesuffix(' version')}" if left_out
                  else "no ok row")
        return blocks + [d.Paragraph(f"No point by {axis}: {reason}.", "note")]
    if plot_series(series, by, png) is not None:
        blocks.append(d.Image(png, f"{series.label}: ms/step by {axis}"))
    folder = _common_folder(series)
    axis_header = _axis_header(by)
    blocks.append(d.Table([axis_header, "environment", "ms/step", "processes", "busy left out", "decides", "change"],
                          [_point_row(series, point) for point in series.points], css_class="results history"))
    blocks.append(d.Table([axis_header, "environment", "started (UTC)", "machine", "fwbench", "pin set",
                           "source files" + (f" (under {folder}/)" if folder else "")],
                          [_provenance_row(point, folder) for point in series.points], css_class="text provenance",
                          collapsible=f"Provenance of the {len(series.points)} point(s): when their rows started, "
                                      "the machine, the fwbench source, the pin set and the result files"))
    notes = []
    busy_only = sum(1 for p in series.points if not p.rows)
    if busy_only:
        notes.append(f"{busy_only} point(s) with busy rows only: not plotted, decide nothing.")
    if series.left_out:
        notes.append(f"{series.left_out} ok row(s) do not record {axis.removesuffix(' version')}: left out.")
    if series.tracks > 1:
        text = history_series.tracks_text(series)
        notes.append(f"{text[0].upper()}{text[1:]}.")
    for point, change in series.changes:
        where = point.at + (f" ({point.environment})" if point.environment else "")
        notes.append(f"Change at {where}: {_change_text(change)}.")
    if not series.changes:
        text = history_series.no_change_text(series)
        notes.append(f"{text[0].upper()}{text[1:]}.")
    return blocks + [d.BulletList(notes)]


def _change_text(change: judge.ChangePoint) -> str:
    return f"x{change.ratio:.3f} {change.word}"


def _axis_header(by: str) -> str:
    package = history_series.parse_by(by)
    return "date" if package is None else package


def _common_folder(series: history_series.Series) -> str:
    """The folder every source file of the series' points lies under ('' where they share none)."""
    files = [PurePath(str(row["source_file"])) for p in series.points for row in p.rows
             if _present(row.get("source_file"))]
    if not files:
        return ""
    try:
        common = PurePath(os.path.commonpath([str(f.parent) for f in files]))
    except ValueError:  # relative and absolute paths mixed
        return ""
    return "" if common in (PurePath("/"), PurePath(".")) else str(common)


def _relative(path: str, folder: str) -> str:
    return str(PurePath(path).relative_to(folder)) if folder else path


def _point_row(series: history_series.Series, point: history_series.Point) -> list[str]:
    changes = [_change_text(change) for at, change in series.changes if at is point]
    if not point.rows:
        decides = "busy only"
    elif point.decides:
        decides = "yes"
    else:
        decides = f"decides nothing (fewer than {judge.MIN_REPEATS} quiet processes)"
    return [point.at, point.environment or "-", "busy only" if point.median_ms is None else f"{point.median_ms:.3f}",
            str(point.processes), str(point.busy), decides, ", ".join(changes)]


def _provenance_row(point: history_series.Point, folder: str) -> list[str]:
    """Where a point's quiet rows come from (a busy-only point keeps no rows: dashes)."""
    rows = point.rows
    machine = "; ".join(f"{column} {value}" for column in MACHINE_COLUMNS
                        for value in [_values(rows, column)] if value)
    fwbench = "; ".join(part for part in (_values(rows, "fwbench_version"),
                                          _prefixed("commit ", _values(rows, "source_commit"))) if part)
    files = [_relative(path, folder) for path in _values(rows, "source_file", sep="\n").splitlines()]
    return [point.at, point.environment or "-", _started_range(rows) or "-", machine or "-", fwbench or "-",
            _values(rows, "pin_set") or "-", "\n".join(files) or "-"]


def _prefixed(prefix: str, text: str) -> str:
    return prefix + text if text else ""


def _present(value) -> bool:
    if value is None:
        return False
    if isinstance(value, float) and math.isnan(value):
        return False
    return str(value) not in ("", "nan", "NaT", "None", "<NA>")


def _values(rows: list[dict], column: str, *, sep: str = ", ") -> str:
    """The distinct values the rows hold in a column, in order of first appearance ('' where none has one)."""
    found = dict.fromkeys(str(row.get(column)) for row in rows if _present(row.get(column)))
    return sep.join(found)


def _started_range(rows: list[dict]) -> str:
    times = sorted(t for t in (started_utc(row.get("started_at")) for row in rows) if t is not None)
    if not times:
        return ""
    first, last = times[0], times[-1]
    if first == last:
        return f"{first:%Y-%m-%d %H:%M:%S}"
    return f"{first:%Y-%m-%d %H:%M:%S} to " + (f"{last:%H:%M:%S}" if first.date() == last.date() else
                                                f"{last:%Y-%m-%d %H:%M:%S}")


def _x_positions(series: history_series.Series, by: str) -> tuple[list, list[str] | None]:
    """Each point's x: its date by date; its version's place in the series' order by version (and the labels)."""
    if history_series.parse_by(by) is None:
        return [dt.date.fromisoformat(p.at) for p in series.points], None
    order = list(dict.fromkeys(p.at for p in series.points))
    return [order.index(p.at) for p in series.points], order


def _math_free(text: str) -> str:
    """Row text for a legend label (legends read $...$ as mathtext, which row text must not be)."""
    return text.replace("$", r"\$")


def plot_series(series: history_series.Series, by: str, path: Path) -> Path | None:
    """One series' points as a PNG: deciding points filled (a colour per environment where they differ), the others
    hollow and grey, busy-only points counted in the legend, each change a dashed line at its first point after."""
    shown = [(x, p) for x, p in zip(_x_positions(series, by)[0], series.points) if p.rows]
    if not shown:
        return None
    xs_all, labels = _x_positions(series, by)
    plt = _pyplot()
    width = 10.0 if labels is None else max(8.0, min(14.0, 4.0 + 0.6 * len(labels)))
    fig, ax = plt.subplots(figsize=(width, 4.2))
    deciding = [(x, p) for x, p in shown if p.decides]
    for track in range(series.tracks):  # a line per track: environments measured side by side are not joined
        members = [(x, p) for x, p in deciding if p.track == track]
        ax.plot([x for x, _ in members], [p.median_ms for _, p in members], color="#bbbbbb", linewidth=1, zorder=1)
    environments = list(dict.fromkeys(p.environment for _, p in deciding))
    for number, environment in enumerate(environments):
        members = [(x, p) for x, p in deciding if p.environment == environment]
        label = (f"{environment}" if len(environments) > 1 and environment else
                 f"decides ({judge.MIN_REPEATS}+ quiet processes)")
        ax.plot([x for x, _ in members], [p.median_ms for _, p in members], linestyle="none", marker="o",
                markersize=6, color=f"C{number % 10}", label=_math_free(label), zorder=3)
    weak = [(x, p) for x, p in shown if not p.decides]
    if weak:
        ax.plot([x for x, _ in weak], [p.median_ms for _, p in weak], linestyle="none", marker="o", markersize=7,
                markerfacecolor="none", markeredgecolor=HOLLOW, markeredgewidth=1.5,
                label=f"decides nothing (fewer than {judge.MIN_REPEATS} quiet processes)", zorder=3)
    busy_only = sum(1 for p in series.points if not p.rows)
    if busy_only:
        ax.plot([], [], linestyle="none", label=f"busy only, not plotted: {busy_only} point(s)")
    where = {id(p): x for x, p in zip(xs_all, series.points)}
    at_x: dict = {}  # changes already labelled at an x (one per track can share it): the next goes below
    for number, (point, change) in enumerate(series.changes):
        x = where[id(point)]
        below = at_x[x] = at_x.get(x, -1) + 1
        ax.axvline(x, color=CHANGE_COLOUR, linestyle="--", linewidth=1.2, zorder=2,
                   label="change found by the judge" if number == 0 else None)
        ax.annotate(_change_text(change), xy=(x, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(4, -4 - 12 * below),
                    textcoords="offset points", ha="left", va="top", fontsize=9, color=CHANGE_COLOUR,
                    parse_math=False)
    if labels is not None:
        ax.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 6 else 0,
                      ha="right" if len(labels) > 6 else "center", parse_math=False)
        ax.set_xlim(-0.5, len(labels) - 0.5)
        ax.set_xlabel(f"{history_series.parse_by(by)} version (in the series' order)")
    else:
        days = sorted({x for x in xs_all})
        if len(days) == 1:  # one day: a week around it, not matplotlib's years
            ax.set_xlim(days[0] - dt.timedelta(days=3), days[0] + dt.timedelta(days=3))
        fig.autofmt_xdate()
        ax.set_xlabel("date (UTC day the rows started)")
    low, high = ax.get_ylim()
    ax.set_ylim(low, high + 0.12 * (high - low))  # room under the top for the change labels
    ax.set_ylabel("ms per step (median of processes)")
    ax.grid(True, alpha=0.3)
    title = ax.set_title(f"{series.label}, by {_axis_name(by)}", fontsize=10, parse_math=False)
    # Right of the plot, not over it: the legend must not hide a point.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)
    fit_titles(fig, title)
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return path
