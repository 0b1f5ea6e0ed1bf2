"""Version sweeps in a report: per cell, ms/step at each sweep point with its interval, a plot, and a verdict for
each step between consecutive points (and the judging that `fwbench bisect` uses).

Rows are sweep rows when their `sweep_point` identity setting is set (fwbench sweep / bisect). A cell's points
are its rows' points in release order (dates in date order). A step's verdict reuses compare's statistics
(fwbench_aggregator.compare: cells paired --across sweep_point, Welch t on log repeat medians, Holm over the
cells of that step), with an equivalence test beside it:

  slower / faster            compare's verdict: Holm-adjusted p < alpha and |change| >= the tolerance.
  equivalent within T%       B/A credibly inside [1/(1+T), 1+T]: both one-sided tests of the same Welch t
                             (LogRatioTest.p_below(1+T), p_above(1/(1+T))), the larger p Holm-adjusted < alpha.
  inconclusive               neither: too few repeats (3 a side are needed for any test), no spread, or an
                             interval that straddles the tolerance. The ratio and its interval are still shown.

The rule is `step_verdict` (one place: the report, `fwbench bisect` and benchmarks/verdict_error_rates.py use it);
bisect calls `judge` at alpha split over its repeated looks (fwbench_aggregator.bisect.look_level).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from fwbench.core import sweep as sweeps_core
from fwbench.core.identity import SECTION_AXES, CellIdentity, differing_settings, held_equal, varying_settings
from fwbench_aggregator import compare as cmp
from fwbench_aggregator import document as d
from fwbench_aggregator import judge, stats
from fwbench_aggregator.loading import LoadedResults
from fwbench_aggregator.variants import Variant

DEFAULT_TOLERANCE_PCT = cmp.DEFAULT_MIN_EFFECT_PCT
EQUIVALENT, FASTER, SLOWER, INCONCLUSIVE = judge.EQUIVALENT, judge.FASTER, judge.SLOWER, judge.INCONCLUSIVE
# The step rule is the judge's; these names stay importable from here for the benchmarks and tests.
from fwbench_aggregator.judge import equivalence_p, step_detail, step_verdict  # noqa: E402


@dataclass(frozen=True)
class StepVerdict:
    """B against A for one cell: the ratio B/A (ms/step), its 95% interval, and the verdict."""

    identity: CellIdentity  # the cell, sweep_point blanked
    before: str
    after: str
    ratio: float | None
    low: float | None
    high: float | None
    verdict: str  # EQUIVALENT, FASTER, SLOWER or INCONCLUSIVE
    detail: str  # why (compare's verdict text, the p-values, what is missing)
    method: str = ""
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT

    @property
    def changed(self) -> bool:
        return self.verdict in (FASTER, SLOWER)

    def text(self, tolerance_pct: float | None = None) -> str:
        tolerance_pct = self.tolerance_pct if tolerance_pct is None else tolerance_pct
        word = f"equivalent within {tolerance_pct:g}%" if self.verdict == EQUIVALENT else self.verdict
        if self.ratio is None:
            return f"{word} ({self.detail})"
        interval = f" [{self.low:.3f}–{self.high:.3f}]" if self.low is not None else ""
        return f"{word}: x{self.ratio:.3f}{interval} ({self.detail})"


def cell_of(identity: CellIdentity) -> CellIdentity:
    """The cell a sweep row belongs to: its identity with the sweep point blanked (its points are compared only with
    each other: held_equal along the sweep axis)."""
    return held_equal(identity, SECTION_AXES["sweep"])


def rows_at(loaded: LoadedResults, label: str | None) -> LoadedResults:
    table = loaded.table
    column = table.column("sweep_point")
    mask = pc.is_null(column) if label is None else pc.fill_null(pc.equal(column, label), False)
    return LoadedResults(table.filter(mask), loaded.files_read)


def rows_of_cell(loaded: LoadedResults, cell: CellIdentity) -> LoadedResults:
    """Only the rows of one cell at any sweep point (`cell`: an identity with the sweep point blanked, cell_of's)."""
    mask = pa.array([cell_of(CellIdentity.of_row(row)) == cell for row in loaded.table.to_pylist()], pa.bool_())
    return LoadedResults(loaded.table.filter(mask), loaded.files_read)


def cells_in(loaded: LoadedResults) -> set[CellIdentity]:
    """The cells (sweep point blanked) that rows of `loaded` belong to."""
    return {cell_of(CellIdentity.of_row(row)) for row in loaded.table.to_pylist()}


def judge(a: LoadedResults, b: LoadedResults, tolerance_pct: float = DEFAULT_TOLERANCE_PCT,
          alpha: float = cmp.DEFAULT_ALPHA) -> list[StepVerdict]:
    """Every cell with ok rows on both sides (sides differing only in the sweep point), B against A."""
    if a.table.num_rows == 0 or b.table.num_rows == 0:
        return []
    rows = [r for r in cmp.compare(a, b, alpha, tolerance_pct, across=SECTION_AXES["sweep"]) if r.paired]
    tested = [r for r in rows if r.test is not None]
    equivalence = cmp.holm([equivalence_p(r.test, tolerance_pct) for r in tested])
    p_equivalent = {id(r): p for r, p in zip(tested, equivalence)}
    verdicts = []
    for r in rows:
        before, after = r.identity.setting("sweep_point"), r.identity_b.setting("sweep_point")
        if id(r) in p_equivalent:
            verdict = step_verdict(r.ratio, r.p_adjusted, p_equivalent[id(r)], tolerance_pct, alpha)
            detail = step_detail(verdict, r.p_adjusted, p_equivalent[id(r)], tolerance_pct)
        else:
            verdict, detail = INCONCLUSIVE, r.verdict
        verdicts.append(StepVerdict(cell_of(r.identity), before, after, r.ratio, r.ratio_low, r.ratio_high,
                                    verdict, detail, r.method, tolerance_pct))
    return verdicts


@dataclass
class PointResult:
    label: str
    installed: str | None
    estimate: stats.Estimate | None  # ok rows only
    statuses: dict[str, int] = field(default_factory=dict)  # status -> rows
    note: str = ""  # the first line of a failed row's message


@dataclass
class CellSweep:
    identity: CellIdentity
    label: str  # stack [compile mode] task, settings
    points: list[PointResult]
    steps: list[StepVerdict]


def cell_sweeps(loaded: LoadedResults, tolerance_pct: float = DEFAULT_TOLERANCE_PCT,
                alpha: float = cmp.DEFAULT_ALPHA) -> list[CellSweep]:
    frame = loaded.frame()
    if "sweep_point" not in frame or frame["sweep_point"].isna().all():
        return []
    frame = frame[frame["sweep_point"].notna()]
    frame = frame.assign(_cell=[cell_of(CellIdentity.of_row(r)) for r in frame.to_dict("records")])
    cells: dict[CellIdentity, list[str]] = {}
    for cell, rows in frame.groupby("_cell", sort=False):
        cells[cell] = sorted(set(rows["sweep_point"]), key=sweeps_core.sort_key)
    # Steps: one compare per pair of consecutive points, over every cell that has that pair (Holm's family).
    pairs: dict[tuple[str, str], list[CellIdentity]] = {}
    for cell, points in cells.items():
        for before, after in zip(points, points[1:]):
            pairs.setdefault((before, after), []).append(cell)
    verdicts: dict[tuple[CellIdentity, str, str], StepVerdict] = {}
    for (before, after), of_pair in pairs.items():
        for v in judge(rows_at(loaded, before), rows_at(loaded, after), tolerance_pct, alpha):
            if v.identity in of_pair:
                verdicts[(v.identity, before, after)] = v
    varying = varying_settings(cells)
    out = []
    for cell, points in cells.items():
        rows = frame[frame["_cell"] == cell]
        results = []
        for label in points:
            at = rows[rows["sweep_point"] == label]
            ok = at[at["status"] == "ok"]
            estimate = (stats.estimate([stats.repeat_samples(s, m) for s, m in zip(ok["step_ms"], ok["ms_per_step"])])
                        if len(ok) else None)
            installed = next((str(x) for x in at["sweep_installed"].dropna()), None)
            failed = at[at["status"] != "ok"]
            note = ""
            if len(failed):
                message = str(failed["error_message"].dropna().iloc[0]) if failed["error_message"].notna().any() else ""
                note = message.strip().splitlines()[0][:300] if message.strip() else ""
            results.append(PointResult(label, installed, estimate, at["status"].value_counts().to_dict(), note))
        steps = [verdicts.get((cell, b, a)) or StepVerdict(cell, b, a, None, None, None, INCONCLUSIVE,
                                                            "no ok rows on one side", "", tolerance_pct)
                 for b, a in zip(points, points[1:])]
        out.append(CellSweep(cell, _cell_label(cell, varying), results, steps))
    return out


def _cell_label(cell: CellIdentity, varying: set[str]) -> str:
    """'keras3-jax [xla] bert-fit (tiny)', then every setting off its default or told apart among the sweep's cells
    (as the report's column labels name them: 'device=NVIDIA H100 80GB HBM3'), so no two cells share a title."""
    label = f"{cell.stack} [{cell.compile_mode}] {cell.task} ({cell.preset})"
    settings = Variant("", "", differing_settings(cell, varying)).settings_text
    return f"{label}, {settings}" if settings else label


def fmt_estimate(e: stats.Estimate | None) -> str:
    if e is None:
        return "—"
    return f"{e.median:.2f} [{e.low:.2f}–{e.high:.2f}] ({e.repeats} rep, {e.steps} steps)"


def _point_cell(p: PointResult) -> list[str]:
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(p.statuses.items()))
    installed = p.installed or "—"
    if p.label.startswith(sweeps_core.DATE_PREFIX) and installed != "—":
        installed = installed.replace("; ", ", ")
    return [p.label, fmt_estimate(p.estimate), installed, statuses + (f": {p.note}" if p.note else "")]


def sweep_chart(cell: CellSweep, path: Path) -> Path | None:
    with_data = [p for p in cell.points if p.estimate is not None]
    if not with_data:
        return None
    from fwbench_aggregator.plots import _pyplot, fit_titles

    plt = _pyplot()
    xs = list(range(len(cell.points)))
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(xs) + 2), 4))
    points = [(x, p.estimate) for x, p in zip(xs, cell.points) if p.estimate is not None]
    ax.errorbar([x for x, _ in points], [e.median for _, e in points],
                yerr=[[max(e.median - e.low, 0) for _, e in points], [max(e.high - e.median, 0) for _, e in points]],
                marker="o", capsize=4)
    for x, p in zip(xs, cell.points):
        if p.estimate is None:
            ax.annotate("failed", (x, 0), xytext=(0, 5), textcoords="offset points", ha="center", color="red")
    ax.set_xticks(xs, [p.label for p in cell.points], rotation=20, ha="right")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("ms per step (median, 95% CI; lower is better)")
    # parse_math off: the label holds row text (a device model), which a stray "$" must not break.
    fit_titles(fig, ax.set_title(cell.label, fontsize=9, parse_math=False))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def blocks(loaded: LoadedResults, report_dir: Path, tolerance_pct: float = DEFAULT_TOLERANCE_PCT,
           alpha: float = cmp.DEFAULT_ALPHA) -> list:
    """The "Version sweeps" section (empty without sweep rows)."""
    found = cell_sweeps(loaded, tolerance_pct, alpha)
    if not found:
        return []
    out: list = [d.Heading("Version sweeps"), d.Paragraph(
        "Rows measured at sweep points (`fwbench sweep`, `fwbench bisect`): the pin set's environment with one "
        "package at another version, or every package as the index had it on a date. ms/step: median with its "
        f"95% interval ({stats.CI_METHOD}). Steps between consecutive points: compare's Welch t on log repeat "
        f"medians (Holm over the cells of a step, alpha {alpha:g}), faster/slower only beyond ±{tolerance_pct:g}%; "
        f"equivalent within {tolerance_pct:g}% when both one-sided tests put the ratio inside it; otherwise "
        "inconclusive (3 repeats a side are needed for any verdict). 'installed' is read from the point's "
        "environment.", "note")]
    report_dir.mkdir(parents=True, exist_ok=True)
    for index, cell in enumerate(found):
        out.append(d.Heading(cell.label, 3))
        out.append(d.Table(["point", "ms/step", "installed", "rows"], [_point_cell(p) for p in cell.points],
                           css_class="text"))
        if cell.steps:
            out.append(d.BulletList([f"{s.before} → {s.after}: {s.text(tolerance_pct)}" for s in cell.steps]))
        chart = sweep_chart(cell, report_dir / f"sweep-{index + 1}.png")
        if chart is not None:
            out.append(d.Image(chart, f"ms/step by sweep point, {cell.label}"))
    return out


def write_report(loaded: LoadedResults, report_dir: Path, tolerance_pct: float = DEFAULT_TOLERANCE_PCT,
                 alpha: float = cmp.DEFAULT_ALPHA) -> Path:
    """REPORT_DIR/sweep.md (and sweep.html) with the sweep section alone."""
    doc = d.Document("fwbench version sweep")
    doc.add(*blocks(loaded, report_dir, tolerance_pct, alpha))
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "sweep.md").write_text(d.to_markdown(doc, report_dir))
    (report_dir / "sweep.html").write_text(d.to_html(doc))
    return report_dir / "sweep.md"


def summary_lines(found: list[CellSweep], tolerance_pct: float) -> list[str]:
    """Plain lines for the terminal."""
    lines = []
    for cell in found:
        lines.append(cell.label)
        for p in cell.points:
            lines.append(f"  {p.label:<28} {fmt_estimate(p.estimate)}  installed: {p.installed or '—'}"
                         + ("" if p.estimate is not None else f"  [{', '.join(p.statuses)}] {p.note}"))
        for s in cell.steps:
            lines.append(f"  {s.before} → {s.after}: {s.text(tolerance_pct)}")
    return lines


def log_distance(a: float, b: float) -> float:
    return abs(math.log(a) - math.log(b))
