"""Assemble the report (tables, warnings, plots, published comparison, provenance) as a Document."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from fwbench.core import pins, registry
from fwbench.core.schema import SCHEMA_VERSION, STATUSES

from fwbench_aggregator import document as d
from fwbench_aggregator import physics_section, plots, provenance, published, scaling, stability, stability_runs, stats
from fwbench_aggregator import model_files, sweep
from fwbench_aggregator import precision as precision_axis
from fwbench_aggregator.loading import LoadedResults
from fwbench_aggregator.stats import fmt_estimate, fmt_ms  # in stats: scaling shares them without importing report
from fwbench_aggregator.summary import SPEEDUP_BASELINES, PresetSummary, noise_warnings, summarise


# Marks an estimate that includes rows measured beside other cells of their run (fwbench run --parallel).
CONCURRENT_MARK = "‡"
CONCURRENT_NOTE = (f"{CONCURRENT_MARK} includes repeats that ran at the same time as other cells of their run "
                   "(`fwbench run --parallel`), each on CPU cores (and a GPU) of its own; memory bandwidth and "
                   "caches were still shared.")
# Marks a number measured only while the machine was busy: shown, but ranked and compared nowhere.
BUSY_MARK = "⚠"
BUSY_NOTE = (f"{BUSY_MARK} measured only while something competed with the cell (see Busy rows): shown for "
             "orientation, left out of Keras 3 best, speed-ups, rankings and plots.")


def fmt_speedup(value: float | None) -> str:
    return "—" if value is None else f"{value:+.0f}%"


def _status_word(summary: PresetSummary, task: str, variant) -> str:
    status = summary.statuses.get((task, variant))
    if status is None:
        return "—"  # not run
    if status.busy and status.busy == status.counts.get("ok"):
        return "busy"  # ran ok, but only on a busy machine: see "Busy rows"
    return ", ".join(f"{s}" for s in STATUSES if status.counts.get(s)) or "?"


def main_table(summary: PresetSummary) -> tuple[list[str], list[list[str]]]:
    """Rows = tasks, columns = variants: 'median [95% CI]' ms/step, or the status when nothing ran ok."""
    headers = ["task"] + [v.label for v in summary.variants]
    has_keras3 = any(v.is_keras3 for v in summary.variants)
    if has_keras3:
        headers.append("Keras 3 best")
    rows = []
    for task in summary.tasks:
        row = [task]
        for variant in summary.variants:
            est = summary.estimates.get((task, variant))
            busy_est = summary.busy_estimates.get((task, variant))
            status = summary.statuses.get((task, variant))
            mark = f" {CONCURRENT_MARK}" if status and status.concurrent else ""
            if est is None and busy_est is not None:
                row.append(f"{fmt_estimate(busy_est)}{mark}\u00a0{BUSY_MARK}")  # the mark stays with its number
            elif est is None:
                row.append(_status_word(summary, task, variant))
            else:
                row.append(fmt_estimate(est) + mark)
        if has_keras3:
            best = summary.keras3_best(task)
            row.append(f"{fmt_ms(best[1].median)} ({best[0].stack.removeprefix('keras3-')})" if best else "—")
        rows.append(row)
    return headers, rows


def speedup_table(summary: PresetSummary) -> tuple[list[str], list[list[str]]]:
    headers = ["task"] + [f"Keras 3 best vs {name}" for name, _ in SPEEDUP_BASELINES]
    rows = [[task] + [fmt_speedup(summary.speedup(task, key)) for _, key in SPEEDUP_BASELINES]
            for task in summary.tasks]
    return headers, rows


def status_table(summary: PresetSummary) -> tuple[list[str], list[list[str]]]:
    headers = ["task", "variant"] + list(STATUSES) + ["of which busy", "of which concurrent", "messages"]
    rows = []
    for task in summary.tasks:
        for variant in summary.variants:
            status = summary.statuses.get((task, variant))
            if status is None:
                continue
            counts = [str(status.counts.get(s, 0)) for s in STATUSES]
            rows.append([task, variant.label] + counts + [str(status.busy), str(status.concurrent),
                                                           "; ".join(status.messages) or ""])
    return headers, rows


MATCHED_HEADERS = ["task", "Keras 3 best (bf16)", "Keras 3 ms", "native PyTorch best (bf16)", "native ms",
                   "native / Keras 3 [95% CI]", "speed-up", "rows"]


def matched_table(summaries: list[PresetSummary]) -> list[list[str]]:
    return [[r.task, r.keras.label, fmt_ms(r.keras_ms), r.native.label, fmt_ms(r.native_ms),
             f"{r.ratio.ratio:.2f}x [{r.ratio.low:.2f}–{r.ratio.high:.2f}]", fmt_speedup(r.speedup_pct), r.rows]
            for r in precision_axis.matched_rows(summaries)]


def _matched_section(preset: str, summaries: list[PresetSummary]) -> list:
    """Keras 3 best vs native PyTorch, both at bf16: the published speed-ups read at matched precision."""
    if not any(v.is_keras3 for s in summaries for v in s.variants):
        return []
    blocks = [d.Heading(f"Keras 3 best vs native PyTorch at bf16 ({preset})", 3),
              d.Paragraph("The published speed-ups compare stacks at their own default precisions (TensorFlow and "
                          "JAX allowed TF32 on the A100, PyTorch's matmuls ran fp32: see Physics); here both sides "
                          "ran bf16. Per task: the fastest Keras 3 stack vs native "
                          "PyTorch's fastest compile mode, from the rows run with --precision bf16 (or, for a task "
                          "without them, the published setting's rows where both cells computed in bfloat16, as the "
                          "LLM tasks do). Ratio of medians with a 95% interval (the same two-level bootstrap, each "
                          "side resampled on its own); > 1x and positive = Keras 3 faster. Busy rows are left out.",
                          "note")]
    rows = matched_table(summaries)
    if not rows:
        return blocks + [d.Paragraph("No task has both a Keras 3 and a native PyTorch cell at bf16.")]
    return blocks + [d.Table(MATCHED_HEADERS, rows)]


def _published_section(summary: PresetSummary, reference: dict) -> list:
    pin_set = published.compared_pin_set(summary)
    blocks = [d.Heading(f"Published numbers ({summary.preset})", 3),
              d.Paragraph(f"Reference: {published.REFERENCE_SOURCE}.", "note"),
              d.Paragraph(f"Compared: rows of the {pin_set} pin set" + (
                  " (the published run's library versions; declared deviations are listed per row)."
                  if pin_set == pins.PUBLISHED_PIN_SET else
                  f" (no {pins.PUBLISHED_PIN_SET} rows: library versions differ from the published run; "
                  f"run with --pin-set {pins.PUBLISHED_PIN_SET} to compare like with like)."),
                  "note" if pin_set == pins.PUBLISHED_PIN_SET else "warning")]
    if summary.preset == "paper":
        rows = published.ratios(summary, reference, pin_set)
        if not rows:
            return blocks + [d.Paragraph("No measured cell has a published counterpart.")]
        blocks.append(d.Paragraph("Same sizes as published (preset paper): measured / published median ms per "
                                  "step. Hardware may still differ (see provenance); every other known difference "
                                  "from the published cell is listed in the last column."))
        blocks.append(d.Table(
            ["task", "variant", "measured ms", "published ms", "measured / published", "batch (ours / published)",
             "pin set", "XLA", "compiled", "published note", "differs from the published cell"],
            [[r.task, r.variant.label, fmt_ms(r.measured_ms), fmt_ms(r.published_ms), f"{r.ratio:.2f}x",
              f"{r.measured_batch} / {r.published_batch}", r.facts.pin_set or "—", _yes_no(r.facts.jit_compile),
              r.facts.compiled_target or "—", r.footnote, "; ".join(r.differences) or "—"] for r in rows],
            css_class="text"))
        return blocks
    blocks.append(d.Paragraph(
        f"Sizes differ: preset {summary.preset} is not the published A100 configuration, so absolute ms/step "
        "are not comparable. Only the rank order per task (fastest first) is compared with the published one."))
    ranks = published.rankings(summary, reference, pin_set)
    if not ranks:
        return blocks + [d.Paragraph("Fewer than two measured variants per task have published numbers: "
                                     "no ranking to compare.")]
    blocks.append(d.Table(
        ["task", "measured order (fastest first)", "published order", "same order", "Kendall tau"],
        [[r.task, " < ".join(v.label for v in r.measured_order), " < ".join(v.label for v in r.published_order),
          "yes" if r.same else "no", "—" if r.kendall_tau is None else f"{r.kendall_tau:+.2f}"] for r in ranks],
        css_class="text"))
    return blocks


def _yes_no(value) -> str:
    return "—" if value is None else ("yes" if value else "no")


PRECISION_NOTES = {
    "published": "Precision as published: each cell at the precision the published run used (fp32 with the "
                 "framework's TF32 default, bf16 for the LLMs).",
    "fp32": "Precision fp32: float32 throughout, TF32 off.",
    "tf32": "Precision tf32: float32 variables, TF32 allowed for matmuls and convolutions.",
    "bf16": "Precision bf16: bfloat16 compute (mixed precision where the model trains float32 variables).",
    "fp16": "Precision fp16: float16 compute with float32 variables (mixed precision; training with dynamic loss "
            "scaling, see Numerical stability).",
}


def _preset_section(summary: PresetSummary, reference: dict, report_dir: Path) -> list:
    """One preset at one precision: its ms/step table, speed-ups, noise, plots, published comparison (the
    published precision only) and statuses."""
    p = summary.title
    blocks: list = []
    headers, rows = main_table(summary)
    blocks += [d.Heading(f"ms per step ({p})", 3),
               d.Paragraph("Median ms per step [95% CI] across repeats and steps; lower is better. A cell shows "
                           "its status instead when no repeat ran ok.")]
    if summary.precision in PRECISION_NOTES:
        blocks.append(d.Paragraph(PRECISION_NOTES[summary.precision], "note"))
    blocks.append(d.Table(headers, rows))
    if any(status.concurrent for status in summary.statuses.values()):
        blocks.append(d.Paragraph(CONCURRENT_NOTE, "note"))
    if summary.busy_estimates:
        blocks.append(d.Paragraph(BUSY_NOTE, "note"))
    single = sorted({f"{t} {v.label}" for (t, v), e in summary.estimates.items() if e.repeats == 1})
    if single:
        blocks.append(d.Paragraph(f"{len(single)} cell(s) have a single repeat: their CI only covers step-to-step "
                                  "noise, not process-to-process variation. Use --repeats 3 or more.", "note"))
    if any(v.is_keras3 for v in summary.variants):
        headers, rows = speedup_table(summary)
        blocks += [d.Heading(f"Speed-up of Keras 3 best ({p})", 3),
                   d.Paragraph("As on keras.io: (baseline ms / Keras 3 best ms - 1) x 100%, from medians; "
                               "positive = Keras 3 faster. — = a side is missing."),
                   d.Table(headers, rows)]
    else:
        blocks.append(d.Paragraph("No Keras 3 stack in these results: no 'Keras 3 best' column or Keras speed-ups."))
    warnings = noise_warnings(summary)
    if warnings:
        blocks += [d.Heading(f"Noise warnings ({p})", 3), d.BulletList(warnings, "warning")]
    # File names come from the registry's own preset id and the fixed precision names, never from row content
    # (rows are untrusted; loading admits only known precisions).
    file_key = registry.get_preset(summary.preset).id
    if summary.precision != precision_axis.PUBLISHED:
        token = precision_axis.FILE_TOKENS.get(summary.precision)
        file_key = f"{file_key}-{token}" if token else None
    for name, chart in (("ms_per_step", plots.ms_per_step_chart), ("speedup", plots.speedup_chart)):
        path = chart(summary, report_dir / f"{name}-{file_key}.png") if file_key else None
        if path is not None:
            blocks.append(d.Image(path, f"{name.replace('_', ' ')} chart, preset {p}"))
    if summary.precision == precision_axis.PUBLISHED:
        blocks += _published_section(summary, reference)
    headers, rows = status_table(summary)
    blocks += [d.Heading(f"Status per cell ({p})", 3), d.Table(headers, rows, css_class="text")]
    return blocks


def _busy_section(frame, include_busy: bool) -> list:
    """One warning line with the count; the rows themselves are folded (HTML) or listed at the end (Markdown),
    so that a run on a busy machine still opens with its numbers."""
    from fwbench_aggregator.summary import is_busy

    busy = frame[is_busy(frame) & (frame["status"] == "ok")]
    if busy.empty:
        return []
    what = ("They are included in the tables (--include-busy)." if include_busy else
            f"Cells with only busy rows show their numbers marked {BUSY_MARK}, left out of rankings, speed-ups and "
            "plots; `fwbench aggregate --include-busy` counts them as usual.")
    lines = [f"{row['cell_id']} repeat {int(row['repeat'])}: {row.get('busy_reasons') or 'busy'}"
             for _, row in busy.sort_values(["cell_id", "repeat"]).iterrows()]
    return [d.Heading("Busy rows"),
            d.Paragraph(f"{len(busy)} of {int((frame['status'] == 'ok').sum())} ok row(s) were measured while "
                        "something competed with the cell (other CPU load, other fwbench cells or other GPU "
                        f"processes): their times are not comparable. {what}", "warning"),
            d.Folded("Busy rows and why", [d.BulletList(lines, "warning")], len(lines))]


def _concurrent_summary(frame) -> list:
    """One line for the run summary: how many ok rows ran beside other cells of their run."""
    from fwbench_aggregator.summary import ran_concurrently

    ok = frame[frame["status"] == "ok"]
    concurrent = ok[ran_concurrently(ok)]
    if concurrent.empty:
        return []
    most = int(concurrent["parallel_cells"].max())
    return [d.Paragraph(f"{len(concurrent)} of {len(ok)} ok row(s) ran concurrently, up to {most} cells at once "
                        "(`fwbench run --parallel`), each on CPU cores (and a GPU) of its own: their neighbours do not "
                        f"make them busy, and the tables mark them {CONCURRENT_MARK}. Their cores and GPU are in the "
                        "provenance rows.", "note")]


def build_document(loaded: LoadedResults, report_dir: Path,
                   include_busy: bool = False) -> tuple[d.Document, list[PresetSummary]]:
    frame = loaded.frame()
    summaries = summarise(model_files.published_rows(frame), include_busy)  # model files: their own section
    reference = published.load_published()
    doc = d.Document("fwbench report")
    doc.add(d.Paragraph(
        f"{len(frame)} rows from {loaded.files_read} result files (schema v{SCHEMA_VERSION}); generated "
        f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC. Merged rows: merged.parquet."),
        d.Paragraph(f"Confidence intervals: {stats.CI_METHOD}. Ranking warnings use the Cumming & Finch rule: "
                    "CIs overlapping by more than half the average margin of error cannot be ranked.", "note"))
    doc.add(*_concurrent_summary(frame))
    if loaded.skipped:
        doc.add(d.Heading("Skipped files"), d.BulletList([s.line() for s in loaded.skipped], "warning"))
    if loaded.notes:
        doc.add(d.Heading("De-duplication"), d.BulletList(loaded.notes, "note"))
    doc.add(*_busy_section(frame, include_busy))
    compile_notes = provenance.compile_warnings(frame)
    if compile_notes:
        doc.add(d.Heading("Compilation warnings"), d.BulletList(compile_notes, "warning"))
    for preset in dict.fromkeys(s.preset for s in summaries):
        of_preset = [s for s in summaries if s.preset == preset]
        doc.add(d.Heading(f"Preset {preset}"))
        if len(of_preset) > 1:
            doc.add(d.Paragraph("One ms/step table per precision: " + ", ".join(s.precision for s in of_preset)
                                + ". Rows without a precision setting (before schema v7) read by their TF32 "
                                "setting: default as published, on as tf32, off as fp32.", "note"))
        for summary in of_preset:
            doc.add(*_preset_section(summary, reference, report_dir))
        doc.add(*_matched_section(preset, of_preset))
    doc.add(*model_files.blocks(frame, include_busy))
    doc.add(*sweep.blocks(loaded, report_dir))
    doc.add(*scaling.blocks(frame, report_dir))
    doc.add(*stability.blocks(frame))
    doc.add(*stability_runs.blocks(loaded.stability, report_dir))
    doc.add(*physics_section.blocks(frame))
    env_sets, _ = provenance.environment_sets(frame)
    doc.add(d.Heading("Provenance"),
            d.Paragraph("Every row: stack, versions (environment set), image, device, TF32 state, compile mode "
                        "and whether compilation took effect."),
            d.Heading("Environment sets (library versions)", 3),
            d.Table(["env", "python", "library versions"],
                    [[e.name, e.python, ", ".join(f"{k}=={v}" for k, v in e.versions.items()) or "—"]
                     for e in env_sets], css_class="text"),
            d.Heading("Rows", 3),
            d.Table(list(provenance.PROVENANCE_HEADERS), provenance.provenance_rows(frame), css_class="text",
                    collapsible=f"{len(frame)} rows"))
    return doc, summaries
