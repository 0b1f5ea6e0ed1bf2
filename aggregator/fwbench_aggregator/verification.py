"""`fwbench verify`'s judgement and report: published rows against the same cells re-run by a third party.

Cells pair by identity without the device (the re-run may be on another host): on the same device model a
verdict per cell from `compare`'s interval (reproduced within the tolerance, slower, faster); on a different
device the ratio only, marked "not comparable". A published cell whose re-run did not end ok, or read other
inputs, did not reproduce. Writes verification.md, verification.html and verification.parquet.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from fwbench.core.atomic import write_atomically
from fwbench.core.identity import CellIdentity
from fwbench_aggregator import compare, loading

ANY_DEVICE = "(any device)"
DEFAULT_TOLERANCE_PCT = 10.0
REPRODUCED, SLOWER, FASTER, NOT_COMPARABLE = "reproduced", "slower", "faster", "not comparable"
NOT_REPRODUCED = "not reproduced"


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
           fail_above_pct: float | None = None) -> list[VerifiedCell]:
    pub_facts, rerun_facts = _facts(published.frame()), _facts(rerun.frame())
    cells = []
    for row in compare.compare(_without_device(published), _without_device(rerun)):
        if row.a is None:  # re-run rows with no published partner: not what was asked; ignore
            continue
        pub, again = pub_facts.get(row.identity, {}), rerun_facts.get(row.identity, {})
        pub_device = ", ".join(sorted(map(str, pub.get("devices", ()))))
        rerun_device = ", ".join(sorted(map(str, again.get("devices", ())))) or None
        cell = VerifiedCell(row.identity.stack, row.task, row.preset, row.variant.label, row.median_a, row.median_b,
                            row.ratio, row.ratio_low, row.ratio_high, pub_device, rerun_device, "", "", False)
        if row.b is None:
            statuses = ", ".join(sorted(set(again.get("statuses", [])))) or "not run"
            cell.verdict, cell.detail, cell.fails = NOT_REPRODUCED, f"re-run ended: {statuses}", True
        elif pub.get("inputs") and again.get("inputs") and pub["inputs"] != again["inputs"]:
            cell.verdict, cell.detail, cell.fails = NOT_REPRODUCED, "the re-run read other inputs (input_sha256)", True
        elif pub_device != rerun_device:
            cell.verdict = NOT_COMPARABLE
            cell.detail = f"published on {pub_device}, re-run on {rerun_device}: ratio only"
        else:
            _judge(cell, row, tolerance_pct, fail_above_pct)
        cells.append(cell)
    return cells


def _judge(cell: VerifiedCell, row: compare.CellComparison, tolerance_pct: float, fail_above_pct: float | None) -> None:
    high, low = 1 + tolerance_pct / 100, 1 - tolerance_pct / 100
    if row.has_interval:
        span = f"B/A {row.ratio:.3f} [{row.ratio_low:.3f}, {row.ratio_high:.3f}] ({row.method})"
        if row.p_adjusted is not None:  # repeats on both sides: compare's test (Holm-adjusted) has the last word
            span += f", p={row.p_adjusted:.3g}: {row.verdict}"
        if row.p_adjusted is not None and row.verdict not in ("slower", "faster"):
            cell.verdict = REPRODUCED
        elif row.ratio_low > high:
            cell.verdict = SLOWER
        elif row.ratio_high < low:
            cell.verdict = FASTER
        else:
            cell.verdict = REPRODUCED
        cell.detail = f"{span}; tolerance ±{tolerance_pct:g}%"
        if fail_above_pct is not None:
            cell.fails = row.ratio_low > 1 + fail_above_pct / 100
    else:  # too few samples for an interval: the ratio alone decides, and says so
        cell.verdict = SLOWER if row.ratio > high else FASTER if row.ratio < low else REPRODUCED
        cell.detail = f"B/A {row.ratio:.3f}, no interval ({row.verdict}); tolerance ±{tolerance_pct:g}%"
        if fail_above_pct is not None:
            cell.fails = row.ratio > 1 + fail_above_pct / 100


HEADERS = ("stack", "task", "preset", "variant", "published ms", "re-run ms", "re-run/published", "95% CI",
           "verdict", "detail")


def _cells_as_text(cell: VerifiedCell) -> list[str]:
    def ms(value):
        return "—" if value is None or value != value else f"{value:.4g}"

    return [cell.stack, cell.task, cell.preset, cell.variant, ms(cell.published_ms), ms(cell.rerun_ms),
            "—" if cell.ratio is None else f"{cell.ratio:.3f}",
            f"{cell.ratio_low:.3f}–{cell.ratio_high:.3f}" if cell.ratio_low is not None else "—",
            cell.verdict + (" (FAIL)" if cell.fails else ""), cell.detail]


def write_report(cells: list[VerifiedCell], out_dir: Path, facts: list[tuple[str, str]]) -> Path:
    """verification.md / .html / .parquet in out_dir; `facts` are (name, value) lines for the header
    (bundle, release, signature, images checked)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    failing = sum(c.fails for c in cells)
    summary = (f"{len(cells)} cell(s): " + ", ".join(f"{sum(c.verdict == v for c in cells)} {v}" for v in
               (REPRODUCED, SLOWER, FASTER, NOT_COMPARABLE, NOT_REPRODUCED) if any(c.verdict == v for c in cells))
               + f"; {failing} failing")
    lines = ["# fwbench verification", "", *[f"- **{name}**: {value}" for name, value in facts], f"- **result**: {summary}",
             "", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(text.replace("|", "\\|") for text in _cells_as_text(c)) + " |" for c in cells]
    md = out_dir / "verification.md"
    write_atomically(md, "\n".join(lines) + "\n")
    body = "".join(f"<li><b>{html.escape(n)}</b>: {html.escape(v)}</li>" for n, v in facts)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(t)}</td>" for t in _cells_as_text(c)) + "</tr>" for c in cells)
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

