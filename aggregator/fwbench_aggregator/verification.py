"""`fwbench verify`'s judgement and report: published rows against the same cells re-run by a third party.

Cells pair by identity without the device (the re-run may be on another host). On the same device model each
cell gets an equivalence test (TOST): the interval of re-run/published (Welch's t on the log repeat medians
with `compare`'s capped df) must lie wholly inside [1 - tolerance, 1 + tolerance] for "reproduced". The
interval's confidence is 1 - 2 x alpha / L (90% with one look), where L is the number of looks verify may take
at a cell (it adds re-run repeats to inconclusive cells, see `look_schedule`): Bonferroni over the looks, so a
cell whose true change is beyond the tolerance is called reproduced at most alpha (5%) of the time however
many looks it got. Each cell's "reproduced" is an intersection-union test, so "every cell reproduced" needs no
multiplicity correction across cells.

"slower" / "faster" are claims against an honest publisher, so they are family-wise: the one-sided test of
"re-run/published > 1 + tolerance" (or "< 1 - tolerance") must reject at alpha / (2 x m x L), with m the cells
judged (2 one-sided tests each) and L the looks (Bonferroni over cells, sides and looks; for the pass/fail
outcome Holm would decide the same). So an honest bundle gets any cell called slower or faster in at most
alpha (5%) of verifications, with unequal noise or unequal repeats on the two sides, and with added repeats
(benchmarks/verdict_error_rates.py shows it). Anything between is "inconclusive": too few repeats or too noisy
(a matter of power, which added repeats buy). Each side needs compare.MIN_REPEATS (3) repeats; with fewer, or
identical repeats on both sides (no spread), the cell is inconclusive and says why.
On a different device: the ratio only, "not comparable". A published cell whose re-run did not end ok, or
read other inputs, is "not reproduced". Every verdict but "reproduced" fails the verification (inconclusive
only may be allowed, and is still reported). Busy rows (another process or cell competed while they were timed)
decide nothing (fwbench_aggregator.judge's one policy): each side is judged from its quiet rows only, a side with no
quiet row is "not judged: busy" (inconclusive), and the rows left out are named.
The rule itself (`Rule`, `judge_arrays`, `decidable_by`) is the judge's (fwbench_aggregator.judge).
Writes verification.md, verification.html and verification.parquet.

The pure core (`Rule`, `judge_arrays`, `look_schedule`, `decidable_by`, `with_added_repeats`) takes no rows: the benchmark and
the tests call it with simulated repeat medians.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Hashable

import pandas as pd
import pyarrow as pa

from fwbench.core.atomic import write_atomically
from fwbench.core.identity import CellIdentity
from fwbench_aggregator import compare, judge, loading

ANY_DEVICE = "(any device)"
DEFAULT_TOLERANCE_PCT = judge.VERIFY_TOLERANCE_PCT
DEFAULT_ALPHA = judge.VERIFY_ALPHA
DEFAULT_MAX_REPEATS = 15  # re-run repeats a cell may get when it is inconclusive (verify --max-repeats)
EQUIVALENCE_CONFIDENCE = 0.90  # TOST at 5% per side, with one look
# verify's rule is the judge's; these names stay importable from here for the benchmarks and tests.
from fwbench_aggregator.judge import (FASTER, INCONCLUSIVE, REPRODUCED, SLOWER, Rule, decidable_by,  # noqa: E402
                                      judge_arrays)
NOT_COMPARABLE, NOT_REPRODUCED = "not comparable", "not reproduced"
VERDICTS = (REPRODUCED, SLOWER, FASTER, INCONCLUSIVE, NOT_COMPARABLE, NOT_REPRODUCED)


@dataclass
class VerifiedCell:
    stack: str
    task: str
    preset: str
    variant: str
    published_ms: float | None
    rerun_ms: float | None
    ratio: float | None
    ratio_low: float | None
    ratio_high: float | None
    published_device: str | None
    rerun_device: str | None
    verdict: str
    detail: str
    fails: bool
    # Added columns (older verification.parquet files lack them):
    published_repeats: int | None = None
    rerun_repeats: int | None = None
    interval_confidence: float | None = None  # of ratio_low/ratio_high; None when there is no interval
    # Not written to verification.parquet:
    resolvable: bool = field(default=False, repr=False)  # inconclusive, and more re-run repeats could decide it
    identity: CellIdentity | None = field(default=None, repr=False)  # device-free identity of the cell


REPORT_COLUMNS = [name for name in VerifiedCell.__dataclass_fields__ if name not in ("resolvable", "identity")]


def look_schedule(initial: int, max_repeats: int) -> list[int]:
    """The re-run repeat counts at which a cell is judged: the first pass, then batches of `initial` added
    repeats up to `max_repeats` (5, 10, 15 for the defaults). Its length is L, the looks a cell may get."""
    if max_repeats <= initial:
        return [initial]
    return list(range(initial, max_repeats, initial)) + [max_repeats]


def with_added_repeats(judge: Callable[[], list], add: Callable[[dict[Hashable, int]], None], schedule: list[int],
                       key: Callable[[object], Hashable], time_left: Callable[[], bool] = lambda: True) -> list:
    """The added-repeats loop: judge every cell; give each resolvable (inconclusive) cell re-run repeats up to the
    schedule's next count (add({key: count})) and judge again, until none is left, the schedule ends or
    time_left() says no. judge() must judge at Rule(looks=len(schedule)): each cell is judged at most that many
    times. Returns the last judgement."""
    cells = judge()
    for target in schedule[1:]:
        wanted = {key(c): target for c in cells if c.resolvable and (c.rerun_repeats or 0) < target}
        if not wanted or not time_left():
            break
        add(wanted)
        cells = judge()
    return cells


def _without_device(loaded: loading.LoadedResults) -> loading.LoadedResults:
    table = loaded.table
    index = table.schema.get_field_index("device_model")
    column = pa.array([ANY_DEVICE] * table.num_rows, type=table.schema.field(index).type)
    return loading.LoadedResults(table.set_column(index, "device_model", column), loaded.files_read)


def _facts(frame: pd.DataFrame) -> dict[CellIdentity, dict]:
    """Per device-free identity: the device model, the input hashes and the statuses of its rows."""
    facts: dict[CellIdentity, dict] = {}
    for row in frame.to_dict("records"):
        identity = CellIdentity.of_row({**row, "device_model": ANY_DEVICE})
        entry = facts.setdefault(identity, {"devices": set(), "inputs": set(), "statuses": []})
        entry["devices"].add(row.get("device_model"))
        if row.get("input_sha256"):
            entry["inputs"].add(row["input_sha256"])
        entry["statuses"].append(row["status"])
    return facts


def verify(published: loading.LoadedResults, rerun: loading.LoadedResults, tolerance_pct: float = DEFAULT_TOLERANCE_PCT,
           fail_above_pct: float | None = None, allow_inconclusive: bool = False, *, looks: int = 1,
           alpha: float = DEFAULT_ALPHA, max_rerun_repeats: int | None = None) -> list[VerifiedCell]:
    """One VerifiedCell per published cell; `fails` is True for every verdict but "reproduced" (and
    "inconclusive" with allow_inconclusive), and for a cell whose interval lies above +fail_above_pct.
    `looks`: how many times verify may judge a cell (len(look_schedule(...))); the levels are adjusted for them.
    `max_rerun_repeats`: the cap on re-run repeats; an inconclusive cell that the cap cannot decide
    (decidable_by) is not resolvable and says so."""
    pub_facts, rerun_facts = _facts(published.frame()), _facts(rerun.frame())
    cells, to_judge = [], []
    for row in compare.compare(_without_device(published), _without_device(rerun)):
        if row.a is None:  # re-run rows with no published partner: not what was asked; ignore
            continue
        pub, again = pub_facts.get(row.identity, {}), rerun_facts.get(row.identity, {})
        pub_device = ", ".join(sorted(map(str, pub.get("devices", ()))))
        rerun_device = ", ".join(sorted(map(str, again.get("devices", ())))) or None
        cell = VerifiedCell(row.identity.stack, row.task, row.preset, row.variant.label, row.median_a, row.median_b,
                            row.ratio, None, None, pub_device, rerun_device, "", "", False,
                            published_repeats=len(row.a.repeats), rerun_repeats=None if row.b is None else len(row.b.repeats),
                            identity=row.identity)
        if row.b is None:
            statuses = ", ".join(sorted(set(again.get("statuses", [])))) or "not run"
            cell.verdict, cell.detail = NOT_REPRODUCED, f"re-run ended: {statuses}"
        elif pub.get("inputs") and again.get("inputs") and pub["inputs"] != again["inputs"]:
            cell.verdict, cell.detail = NOT_REPRODUCED, "the re-run read other inputs (input_sha256)"
        elif pub_device != rerun_device:
            cell.verdict = NOT_COMPARABLE
            cell.detail = f"published on {pub_device}, re-run on {rerun_device}: ratio only, nothing verified"
        else:
            to_judge.append((cell, row))
        cells.append(cell)
    rule = Rule(tolerance_pct, alpha, cells=len(to_judge), looks=looks)
    for cell, row in to_judge:
        _judge(cell, row, rule, max_rerun_repeats)
    for cell in cells:
        cell.fails = cell.verdict != REPRODUCED and not (cell.verdict == INCONCLUSIVE and allow_inconclusive)
        if fail_above_pct is not None and judge.interval_above(cell.ratio_low, 1 + fail_above_pct / 100):
            cell.fails = True
    return cells


def _judge(cell: VerifiedCell, row: compare.CellComparison, rule: Rule, cap: int | None = None) -> None:
    """The cell's verdict from its quiet rows, and which busy rows were left out (whatever the verdict)."""
    if row.not_judged:  # a side with only busy rows, or rows of several environments: it decides nothing
        cell.verdict, cell.detail = INCONCLUSIVE, row.not_judged
        cell.resolvable = not row.a.not_judged  # more re-runs can help only the re-run side
        return
    _verdict(cell, row, rule, cap)
    _note_busy(cell, row.a.busy, row.b.busy)


def _verdict(cell: VerifiedCell, row: compare.CellComparison, rule: Rule, cap: int | None) -> None:
    """TOST against [1 - tolerance, 1 + tolerance], family-wise one-sided tests for slower/faster (module doc)."""
    n_pub, n_rerun = cell.published_repeats, cell.rerun_repeats
    tolerance = f"tolerance ±{rule.tolerance_pct:g}%"
    if min(n_pub, n_rerun) < compare.MIN_REPEATS:
        cell.verdict = INCONCLUSIVE
        cell.detail = (f"needs {compare.MIN_REPEATS} repeats a side; published has {n_pub}, re-run has {n_rerun} "
                       f"(B/A {row.ratio:.3f} not judged)")
        cell.resolvable = n_pub >= compare.MIN_REPEATS  # more re-runs help only the re-run side
        return
    if row.test is None:
        cell.verdict = INCONCLUSIVE
        cell.detail = f"identical repeats on both sides: no spread to judge (B/A {row.ratio:.3f} not judged)"
        cell.resolvable = True
        return
    (verdict,), (low,), (high,), (p_slower,), (p_faster,) = judge_arrays(
        [row.test.log_ratio], [row.test.se], [row.test.dof], rule)
    cell.verdict, cell.ratio_low, cell.ratio_high = str(verdict), float(low), float(high)
    cell.interval_confidence = rule.tost_confidence
    cell.detail = (f"B/A {row.ratio:.3f}, {rule.tost_confidence * 100:.3g}% interval [{low:.3f}, {high:.3f}] (Welch t "
                   f"on log repeat medians, df {row.test.dof:.1f}; {n_pub} vs {n_rerun} repeats); {tolerance}")
    if cell.verdict in (SLOWER, FASTER):
        p = p_slower if cell.verdict == SLOWER else p_faster
        cell.detail += f"; one-sided p {p:.2g}: {rule.describe()}"
    elif cell.verdict == INCONCLUSIVE:
        cell.resolvable = True
        cell.detail += judge.inconclusive_reason(low, high, p_slower, p_faster, rule)
        if cap is not None and n_rerun < cap:
            if not decidable_by(compare.log_moments(row.a.repeat_medians), compare.log_moments(row.b.repeat_medians),
                                cap, rule):
                cell.resolvable = False
                cell.detail += (f"; not re-run further: even {cap} re-run repeats would leave the interval wider "
                                f"than the tolerance at the published side's spread (the publisher needs more repeats"
                                f" or a quieter machine)")


def _note_busy(cell: VerifiedCell, published_busy: int, rerun_busy: int) -> None:
    """Busy rows decide nothing (the judge's policy): the verdict came from the quiet rows; say what was left out."""
    if published_busy or rerun_busy:
        cell.detail += f"; busy rows left out: published {published_busy}, re-run {rerun_busy}"


def outcome(cells: list[VerifiedCell]) -> tuple[int, list[str]]:
    """verify's exit code (0 only when no cell fails) and the stderr lines that say which cells failed, and
    how many inconclusive ones passed only because they were allowed."""
    lines = []
    failing = [c for c in cells if c.fails]
    if failing:
        names = ", ".join(f"{c.task} {c.variant} ({c.verdict})" for c in failing[:10])
        more = f" and {len(failing) - 10} more" if len(failing) > 10 else ""
        lines.append(f"not verified: {len(failing)} of {len(cells)} cell(s) not reproduced: {names}{more}")
    allowed = [c for c in cells if c.verdict == INCONCLUSIVE and not c.fails]
    if allowed:
        lines.append(f"note: {len(allowed)} inconclusive cell(s) passed only because of --allow-inconclusive")
    return (1 if failing else 0), lines


HEADERS = ("stack", "task", "preset", "variant", "published ms", "re-run ms", "re-run/published", "interval",
           "verdict", "detail")


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|#!])")


def plain_text(text: str) -> str:
    """Text from rows or bundles (device names, messages) with control characters shown as '?': no terminal
    escape sequence or line break from a bundle reaches the terminal or a report."""
    return _CONTROL.sub("?", str(text))


def markdown_text(text: str) -> str:
    """plain_text with Markdown's active characters (and raw HTML's < >) escaped: shown, never interpreted."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", plain_text(text)).replace("&", "&amp;")


def _cells_as_text(cell: VerifiedCell) -> list[str]:
    def ms(value):
        return "—" if value is None or value != value else f"{value:.4g}"

    return [cell.stack, cell.task, cell.preset, cell.variant, ms(cell.published_ms), ms(cell.rerun_ms),
            "—" if cell.ratio is None else f"{cell.ratio:.3f}",
            (f"{cell.ratio_low:.3f}–{cell.ratio_high:.3f} ({cell.interval_confidence * 100:.3g}%)"
             if cell.ratio_low is not None else "—"),
            cell.verdict + (" (FAIL)" if cell.fails else ""), cell.detail]


def write_report(cells: list[VerifiedCell], out_dir: Path, facts: list[tuple[str, str]]) -> Path:
    """verification.md / .html / .parquet in out_dir; `facts` are (name, value) lines for the header
    (bundle, release, signature, images checked)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    failing = sum(c.fails for c in cells)
    allowed = sum(c.verdict == INCONCLUSIVE and not c.fails for c in cells)
    summary = (f"{len(cells)} cell(s): " + ", ".join(f"{sum(c.verdict == v for c in cells)} {v}" for v in VERDICTS
                                                     if any(c.verdict == v for c in cells))
               + f"; {failing} failing"
               + (f" ({allowed} inconclusive allowed by --allow-inconclusive)" if allowed else ""))
    lines = ["# fwbench verification", "", *[f"- **{name}**: {markdown_text(value)}" for name, value in facts],
             f"- **result**: {summary}", "", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(markdown_text(text) for text in _cells_as_text(c)) + " |" for c in cells]
    md = out_dir / "verification.md"
    write_atomically(md, "\n".join(lines) + "\n")
    body = "".join(f"<li><b>{html.escape(n)}</b>: {html.escape(plain_text(v))}</li>" for n, v in facts)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(plain_text(t))}</td>" for t in _cells_as_text(c)) + "</tr>"
                   for c in cells)
    write_atomically(out_dir / "verification.html",
                f"<!doctype html><html><head><meta charset='utf-8'><title>fwbench verification</title></head><body>"
                f"<h1>fwbench verification</h1><ul>{body}<li><b>result</b>: {html.escape(summary)}</li></ul>"
                f"<table border='1'><tr>{''.join(f'<th>{html.escape(h)}</th>' for h in HEADERS)}</tr>{rows}</table>"
                "</body></html>\n")
    frame = pd.DataFrame([{name: getattr(c, name) for name in REPORT_COLUMNS} for c in cells], columns=REPORT_COLUMNS)
    tmp = out_dir / ".verification.parquet.tmp"
    frame.to_parquet(tmp, index=False)
    tmp.replace(out_dir / "verification.parquet")
    return md

