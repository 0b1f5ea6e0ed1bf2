"""The report's numerical-stability section: rows that diverged, and what fp16 training rows recorded about
loss scaling (schema v7 columns; older rows have none, and the section says so)."""

from __future__ import annotations

import math

from fwbench_aggregator import document as d
from fwbench_aggregator.precision import row_precision

DIVERGED = "diverged"
LOSS_SCALE_COLUMNS = ("loss_scale", "loss_scale_skipped_steps", "nonfinite_losses")
HEADERS = ["cell", "repeat", "status", "compute dtype", "loss scale", "skipped steps", "non-finite losses"]


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _text(value, integer: bool = False) -> str:
    if _missing(value):
        return "—"
    if integer:
        return str(int(value))
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def _fp16(row: dict) -> bool:
    compute = str(row.get("compute_dtype") or "")
    return row_precision(row) == "fp16" or ("float16" in compute and "bfloat16" not in compute)


def diverged_lines(frame) -> list[str]:
    if "status" not in frame:
        return []
    lines = []
    for row in frame[frame["status"] == DIVERGED].sort_values(["cell_id", "repeat"]).to_dict("records"):
        message = str(row.get("error_message") or "").strip()
        first = message.splitlines()[0][:300] if message else "no message"
        lines.append(f"{row['cell_id']} repeat {int(row['repeat'])}: {first}")
    return lines


def loss_scale_rows(frame) -> list[list[str]]:
    """fp16 fit rows that recorded any loss-scaling column."""
    present = [c for c in LOSS_SCALE_COLUMNS if c in frame]
    if not present or "task_kind" not in frame:
        return []
    rows = []
    for row in frame[frame["task_kind"] == "fit"].sort_values(["cell_id", "repeat"]).to_dict("records"):
        if not _fp16(row) or all(_missing(row.get(c)) for c in present):
            continue
        rows.append([str(row["cell_id"]), str(int(row["repeat"])), str(row["status"]),
                     str(row.get("compute_dtype") or "—"), _text(row.get("loss_scale")),
                     _text(row.get("loss_scale_skipped_steps"), True), _text(row.get("nonfinite_losses"), True)])
    return rows


def blocks(frame) -> list:
    diverged, scaled = diverged_lines(frame), loss_scale_rows(frame)
    out: list = [d.Heading("Numerical stability")]
    if not diverged and not scaled:
        return out + [d.Paragraph("No row diverged, and no fp16 fit row recorded loss scaling.", "note")]
    if diverged:
        out += [d.Paragraph(f"{len(diverged)} row(s) diverged (non-finite losses): their times are in no table.",
                            "warning"),
                d.BulletList(diverged, "warning")]
    if scaled:
        out += [d.Paragraph("fp16 training rows: the final dynamic loss scale, the steps it skipped (an overflow "
                            "halves the scale and drops the update) and the non-finite losses seen.", "note"),
                d.Table(HEADERS, scaled, css_class="text")]
    return out
