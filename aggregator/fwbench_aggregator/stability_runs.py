"""The report's Stability section: `fwbench stability` records (fwbench.core.stability), one table row per record
(stack, task, precision, steps, seed...): the loss at the precision against fp32's, the largest deviation, non-finite
and skipped steps, the loss scale's back-off, and the divergence verdict by the rule stated above the table."""

from __future__ import annotations

import math

from fwbench.core import stability as stability_core
from pathlib import Path

from fwbench_aggregator import document as d
from fwbench_aggregator import plots

HEADERS = ["stack", "task", "precision", "preset", "device", "steps", "seed", "status", "loss first → final",
           "fp32 final", "max deviation from fp32 (step)", "non-finite steps", "skipped steps", "loss scale start → end",
           "diverged", "note"]
RULE = (f"Each fit ran untimed on a learnable target (a deterministic function of the shared inputs), once at the "
        f"precision and once at fp32. Deviation at a step = |loss − fp32 loss| / max(|fp32 loss|, "
        f"{stability_core.RELATIVE_FLOOR:g} × fp32's first loss); final loss = mean of the last "
        f"{stability_core.FINAL_WINDOW} steps. Diverged: any non-finite loss, or a final loss above "
        f"{stability_core.DIVERGENCE_FACTOR:g} × fp32's (floored the same way). Skipped steps are the optimizer "
        "steps dynamic loss scaling dropped for non-finite gradients, each halving the scale. Both fits start from "
        "weights seeded by the seed; fits whose initial weights differ (checksums) are incomparable, never compared.")


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _num(value, spec: str = ".4g") -> str:
    return "—" if _missing(value) else format(value, spec)


def _int(value) -> str:
    return "—" if _missing(value) else str(int(value))


def order(record: dict) -> tuple:
    """Table and chart order; records of one stack, task and precision differ in steps, seed or other settings."""
    return (record["preset"], record["task"], record["stack"], record["precision"], record.get("steps") or 0,
            record.get("data_seed") or 0, str(record.get("settings_id")), str(record.get("fault")))


def table_rows(records: list[dict]) -> list[list[str]]:
    rows = []
    for r in sorted(records, key=order):
        finished = r["status"] in ("ok", "diverged")
        deviation = (f"{_num(r.get('max_rel_deviation'), '.2%')} ({_int(r.get('max_rel_deviation_step'))})"
                     if finished else "—")
        scale = ("—" if _missing(r.get("loss_scale_final")) else
                 f"{_num(r.get('loss_scale_initial'), 'g')} → {_num(r.get('loss_scale_final'), 'g')}")
        diverged = "—" if r.get("diverged") is None else ("yes" if r["diverged"] else "no")
        note = (r.get("diverged_reason") or "") if finished else str(r.get("error_message") or "").splitlines()[0][:300] \
            if r.get("error_message") else ""
        if r.get("fault"):
            note = f"planted fault {r['fault']}" + (f"; {note}" if note else "")
        rows.append([r["stack"], r["task"], r["precision"], r["preset"], str(r.get("device") or "—"),
                     _int(r.get("steps")), _int(r.get("data_seed")), r["status"],
                     f"{_num(r.get('first_loss'))} → {_num(r.get('final_loss'))}" if finished else "—",
                     _num(r.get("baseline_final_loss")), deviation, _int(r.get("nonfinite_steps")),
                     _int(r.get("loss_scale_skipped_steps")), scale, diverged, note or "—"])
    return rows


CHART = "stability.png"  # a fixed name, never built from a record's content


def blocks(records: list[dict], report_dir: Path | None = None) -> list:
    if not records:
        return []
    diverged = [r for r in records if r.get("diverged")]
    out: list = [d.Heading("Stability"), d.Paragraph(RULE, "note")]
    if diverged:
        out.append(d.Paragraph(f"{len(diverged)} of {len(records)} stability run(s) diverged: " + "; ".join(
            f"{r['stack']} {r['task']} {r['precision']} ({r.get('diverged_reason')})" for r in diverged), "warning"))
    out.append(d.Table(HEADERS, table_rows(records), css_class="text"))
    ordered = sorted(records, key=order)
    chart = plots.stability_chart(ordered, report_dir / CHART) if report_dir is not None else None
    if chart is not None:
        out.append(d.Image(chart, "loss per step at each precision against fp32"))
    return out
