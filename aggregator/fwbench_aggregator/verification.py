"""`fwbench verify`'s judgement and report: published rows against the same cells re-run by a third party.

Cells pair by identity without the device (the re-run may be on another host). On the same device model each
cell gets an equivalence test (TOST, 5% per side): the 90% interval of re-run/published (Welch's t on the log
repeat medians with `compare`'s capped df) must lie wholly inside [1 - tolerance, 1 + tolerance] for
"reproduced". Wholly above the upper bound is "slower", wholly below the lower one "faster"; an interval that
straddles a bound is "inconclusive" (too few repeats or too noisy). Each side needs compare.MIN_REPEATS (3)
repeats; with fewer, or identical repeats on both sides (no spread), the cell is inconclusive and says why.
Each cell's "reproduced" is an intersection-union test, so "every cell reproduced" needs no multiplicity
correction: a cell whose true change is beyond the tolerance is called reproduced at most 5% of the time.
On a different device: the ratio only, "not comparable". A published cell whose re-run did not end ok, or
read other inputs, is "not reproduced". Every verdict but "reproduced" fails the verification (inconclusive
only may be allowed, and is still reported). Busy rows (another process or cell competed while they were timed)
only slow a cell: "slower" with a busy re-run, or "faster" with a busy published side, becomes inconclusive.
Writes verification.md, verification.html and verification.parquet.
"""

from __future__ import annotations

import html
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from fwbench.core.atomic import write_atomically
from fwbench.core.identity import CellIdentity
from fwbench_aggregator import compare, loading

ANY_DEVICE = "(any device)"
DEFAULT_TOLERANCE_PCT = 10.0
EQUIVALENCE_CONFIDENCE = 0.90  # TOST at 5% per side
REPRODUCED, SLOWER, FASTER, NOT_COMPARABLE = "reproduced", "slower", "faster", "not comparable"
NOT_REPRODUCED, INCONCLUSIVE = "not reproduced", "inconclusive"
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
           fail_above_pct: float | None = None, allow_inconclusive: bool = False) -> list[VerifiedCell]:
    """One VerifiedCell per published cell; `fails` is True for every verdict but "reproduced" (and
    "inconclusive" with allow_inconclusive), and for a cell whose interval lies above +fail_above_pct."""
    pub_facts, rerun_facts = _facts(published.frame()), _facts(rerun.frame())
    cells = []
    for row in compare.compare(_without_device(published), _without_device(rerun)):
        if row.a is None:  # re-run rows with no published partner: not what was asked; ignore
            continue
        pub, again = pub_facts.get(row.identity, {}), rerun_facts.get(row.identity, {})
        pub_device = ", ".join(sorted(map(str, pub.get("devices", ()))))
        rerun_device = ", ".join(sorted(map(str, again.get("devices", ())))) or None
        cell = VerifiedCell(row.identity.stack, row.task, row.preset, row.variant.label, row.median_a, row.median_b,
                            row.ratio, None, None, pub_device, rerun_device, "", "", False,
                            published_repeats=len(row.a.repeats), rerun_repeats=None if row.b is None else len(row.b.repeats))
        if row.b is None:
            statuses = ", ".join(sorted(set(again.get("statuses", [])))) or "not run"
            cell.verdict, cell.detail = NOT_REPRODUCED, f"re-run ended: {statuses}"
        elif pub.get("inputs") and again.get("inputs") and pub["inputs"] != again["inputs"]:
            cell.verdict, cell.detail = NOT_REPRODUCED, "the re-run read other inputs (input_sha256)"
        elif pub_device != rerun_device:
            cell.verdict = NOT_COMPARABLE
            cell.detail = f"published on {pub_device}, re-run on {rerun_device}: ratio only, nothing verified"
        else:
            _judge(cell, row, tolerance_pct)
        cell.fails = cell.verdict != REPRODUCED and not (cell.verdict == INCONCLUSIVE and allow_inconclusive)
        if fail_above_pct is not None and cell.ratio_low is not None and cell.ratio_low > 1 + fail_above_pct / 100:
            cell.fails = True
        cells.append(cell)
    return cells


def _judge(cell: VerifiedCell, row: compare.CellComparison, tolerance_pct: float) -> None:
    """TOST: the 90% interval of re-run/published against [1 - tolerance, 1 + tolerance]."""
    low_bound, high_bound = 1 - tolerance_pct / 100, 1 + tolerance_pct / 100
    n_pub, n_rerun = cell.published_repeats, cell.rerun_repeats
    tolerance = f"tolerance ±{tolerance_pct:g}%"
    if min(n_pub, n_rerun) < compare.MIN_REPEATS:
        cell.verdict = INCONCLUSIVE
        cell.detail = (f"needs {compare.MIN_REPEATS} repeats a side; published has {n_pub}, re-run has {n_rerun} "
                       f"(B/A {row.ratio:.3f} not judged)")
        return
    if row.test is None:
        cell.verdict = INCONCLUSIVE
        cell.detail = f"identical repeats on both sides: no spread to judge (B/A {row.ratio:.3f} not judged)"
        return
    low, high = row.test.interval(EQUIVALENCE_CONFIDENCE)
    cell.ratio_low, cell.ratio_high, cell.interval_confidence = low, high, EQUIVALENCE_CONFIDENCE
    if low >= low_bound and high <= high_bound:
        cell.verdict = REPRODUCED
    elif low > high_bound:
        cell.verdict = SLOWER
    elif high < low_bound:
        cell.verdict = FASTER
    else:
        cell.verdict = INCONCLUSIVE
    cell.detail = (f"B/A {row.ratio:.3f}, 90% interval [{low:.3f}, {high:.3f}] (Welch t on log repeat medians, "
                   f"df {row.test.dof:.1f}; {n_pub} vs {n_rerun} repeats); {tolerance}")
    if cell.verdict == INCONCLUSIVE:
        cell.detail += ": the interval straddles a tolerance bound (more repeats or a quieter machine needed)"
    _discount_busy(cell, row.a.busy, row.b.busy)


def _discount_busy(cell: VerifiedCell, published_busy: int, rerun_busy: int) -> None:
    """Load only slows a cell, so a busy side can explain a difference in one direction: "slower" stands only if
    no re-run row was busy, "faster" only if no published row was. Otherwise the cell is inconclusive (it still
    fails) and says a quiet re-run is needed. "reproduced" stands, noted: it held despite the load."""
    if not (published_busy or rerun_busy):
        return
    busy = (f"busy rows: published {published_busy} of {cell.published_repeats}, "
            f"re-run {rerun_busy} of {cell.rerun_repeats}")
    if (cell.verdict == SLOWER and rerun_busy) or (cell.verdict == FASTER and published_busy):
        cell.detail += (f"; {cell.verdict} as measured, but on a busy machine ({busy}), which slows cells by itself:"
                        " not judged, a re-run on a quiet machine is needed")
        cell.verdict = INCONCLUSIVE
    else:
        cell.detail += f"; {busy}"


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
            (f"{cell.ratio_low:.3f}–{cell.ratio_high:.3f} ({cell.interval_confidence:.0%})"
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
    frame = pd.DataFrame([asdict(c) for c in cells], columns=list(VerifiedCell.__dataclass_fields__))
    tmp = out_dir / ".verification.parquet.tmp"
    frame.to_parquet(tmp, index=False)
    tmp.replace(out_dir / "verification.parquet")
    return md

