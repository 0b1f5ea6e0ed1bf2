"""Assemble the report (tables, warnings, plots, published comparison, provenance) as a Document."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from fwbench.core import pins, registry
from fwbench.core.schema import STATUSES

from fwbench_aggregator import document as d
from fwbench_aggregator import physics_section, plots, provenance, published, scaling, stability, stability_runs, stats
from fwbench_aggregator import judge, model_files, sweep, what_ran
from fwbench_aggregator import precision as precision_axis
from fwbench_aggregator.loading import LoadedResults
from fwbench_aggregator.marks import BUSY_MARK, CONCURRENT_MARK
from fwbench_aggregator.stats import fmt_estimate, fmt_ms  # in stats: scaling shares them without importing report
from fwbench_aggregator.summary import SPEEDUP_BASELINES, PresetSummary, headline_rows, noise_warnings, summarise
from fwbench_aggregator.variants import Variant


CONCURRENT_NOTE = (f"{CONCURRENT_MARK} includes repeats that ran at the same time as other cells of their run "
                   "(`fwbench run --parallel`), each on CPU cores (and a GPU) of its own; memory bandwidth and "
                   "caches were still shared.")
BUSY_NOTE = (f"{BUSY_MARK} measured only while something competed with the cell (see Busy rows): shown for "
             "orientation, left out of Keras 3 best, speed-ups, rankings and plots.")


def fmt_speedup(value: float | None) -> str:
    return "—" if value is None else f"{value:+.0f}%"


def fmt_missing(reason: str) -> str:
    """A comparison without its like-for-like side: '—' and why."""
    return f"— ({reason})"


def _group_name(task: str, settings: tuple) -> str:
    """A task's like-for-like group as a row label: 'bert-fit', or 'bert-fit [pins=paper-2024]'."""
    text = Variant("", "", settings).settings_text
    return f"{task} [{text}]" if text else task


def _keras3_best_cell(summary: PresetSummary, task: str) -> str:
    """'21.0 (jax), x1.32 [1.10–1.58] faster than torch': the Keras 3 best of each like-for-like group (its settings
    too when there are several) as the judge ranks it, with its ratio to the runner-up; 'cannot rank' (or 'tie') with
    the candidates the judge cannot rank it above; and a faster cell left out as busy, named."""
    groups = summary.keras3_groups(task) or [settings for settings in summary.groups(task)
                                             if summary.keras3_left_out_busy(task, settings)]
    cells = []
    for settings in groups:
        text = Variant("", "", settings).settings_text if len(groups) > 1 else ""
        ranking = summary.keras3_ranking(task, settings)

        def named(variant: Variant) -> str:
            estimate = summary.estimates[(task, variant)]
            return f"{fmt_ms(estimate.median)} ({', '.join(filter(None, [_backend(variant), text]))})"

        if ranking is None:
            cell = "—"
        elif ranking.winner is not None and len(ranking.order) > 1:
            runner_up = ranking.order[1]
            cell = (f"{named(ranking.winner)}, {ranking.against_fastest[runner_up].text()} faster than "
                    f"{_backend(runner_up)}")
        elif ranking.winner is not None:
            cell = named(ranking.winner)
        else:
            word = "tie" if ranking.tied else "cannot rank"
            cell = f"{word}: " + ", ".join(named(v) for v in ranking.not_ranked)
        busy = summary.keras3_left_out_busy(task, settings)
        if busy:  # a faster number measured only busy: the winner named may not be the winner
            cell += f"; {BUSY_MARK} left out: " + ", ".join(
                f"{fmt_ms(estimate.median)} ({_backend(variant)})" for variant, estimate in busy)
        cells.append(cell)
    return "; ".join(cells) or "—"


def _backend(variant: Variant) -> str:
    return variant.stack.removeprefix("keras3-")


# Marks a cell of an `xla` column that ran without XLA, with the reason, which the note under the table gives: as
# published (Keras 2 SAM predict and SD fit at --jit published), or because --jit off asked for it.
NO_XLA_MARK = "†"
NO_XLA_AS_PUBLISHED = "as published"
NO_XLA_JIT_OFF = "jit off"
NO_XLA_NOTES = {
    NO_XLA_AS_PUBLISHED: f"{NO_XLA_MARK} ran with jit_compile=False, as published for this cell, although its column "
                         "says xla.",
    NO_XLA_JIT_OFF: f"{NO_XLA_MARK} in a jit=off column: ran with jit_compile=False because --jit off asked for it, "
                    "although its column says xla.",
}


def _no_xla_reason(summary: PresetSummary, task: str, variant: Variant) -> str | None:
    """Why a cell of an `xla` column ran without XLA (NO_XLA_AS_PUBLISHED or NO_XLA_JIT_OFF); None when it used XLA,
    or is no such cell."""
    facts = summary.facts.get((task, variant))
    # Parquet booleans arrive as numpy.bool_: test truth, not identity.
    if not (variant.compile_mode == "xla" and facts is not None and facts.jit_compile is not None
            and not bool(facts.jit_compile)):
        return None
    identity = summary.identities.get((task, variant))
    policy = identity.setting("jit") if identity is not None else dict(variant.settings).get("jit", "published")
    # Off the published policy only --jit off turns XLA off (--jit on forces it on).
    return NO_XLA_AS_PUBLISHED if policy == "published" else NO_XLA_JIT_OFF


def _label_mark(summary: PresetSummary, task: str, variant: Variant) -> str:
    return f" {NO_XLA_MARK}" if _no_xla_reason(summary, task, variant) else ""


def _no_xla_notes(summary: PresetSummary) -> list[str]:
    """The † notes the table's marked cells need, one per reason among them."""
    reasons = {_no_xla_reason(summary, task, variant) for task in summary.tasks for variant in summary.variants
               if (task, variant) in summary.estimates}
    return [note for reason, note in NO_XLA_NOTES.items() if reason in reasons]


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
                row.append(summary.status_word(task, variant))
            else:
                row.append(fmt_estimate(est) + mark + _label_mark(summary, task, variant))
        if has_keras3:
            row.append(_keras3_best_cell(summary, task))
        rows.append(row)
    return headers, rows


def speedup_table(summary: PresetSummary) -> tuple[list[str], list[list[str]]]:
    """Per task and like-for-like group with a Keras 3 best: its speed-up over each baseline of the same group (the
    published formula) with the judge's word on the pair, or '—' and why that group has no such baseline."""
    headers = ["task"] + [f"Keras 3 best vs {name}" for name, _ in SPEEDUP_BASELINES]
    rows = []
    for task in summary.tasks:
        groups = summary.keras3_groups(task)
        if not groups:
            rows.append([task] + ["—"] * len(SPEEDUP_BASELINES))  # no Keras 3 cell ran ok: nothing to compare
        for settings in groups:
            rows.append([_group_name(task, settings)] + [
                _speedup_cell(value, summary.speedup_verdict(task, key, settings))
                if (value := summary.speedup(task, key, settings)) is not None
                else fmt_missing(summary.missing(task, settings, *key)) for _, key in SPEEDUP_BASELINES])
    return headers, rows


def _speedup_cell(value: float, verdict: str | None) -> str:
    """'+215% (faster)': the published formula's figure beside what the judge can say of it."""
    return fmt_speedup(value) + ("" if verdict is None else f" ({verdict})")


COST_HEADERS = ["task", "variant", "batch", "samples/s", "tokens/s", "first step s", "peak memory GB", "J/step"]


def cost_table(summary: PresetSummary) -> list[list[str]]:
    """Per cell with ok rows: what its step processed and cost beside its time (medians over repeats)."""
    def num(value, digits=3) -> str:
        return "—" if value is None else f"{value:.{digits}g}"

    return [[task, variant.label, "—" if costs.batch is None else str(costs.batch), num(costs.samples_per_s),
             num(costs.tokens_per_s), num(costs.first_step_s),
             num(None if costs.peak_mem_bytes is None else costs.peak_mem_bytes / 1e9), num(costs.joules_per_step)]
            for task, variant, costs in _cells(summary, summary.costs)]


def _cells(summary: PresetSummary, by_cell: dict):
    """(task, variant, value) of each cell of `by_cell` (keyed by (task, variant)), in table order."""
    for task in summary.tasks:
        for variant in summary.variants:
            if (task, variant) in by_cell:
                yield task, variant, by_cell[(task, variant)]


def status_table(summary: PresetSummary) -> tuple[list[str], list[list[str]]]:
    headers = ["task", "variant"] + list(STATUSES) + ["of which busy", "of which concurrent", "messages"]
    rows = [[task, variant.label] + [str(status.counts.get(s, 0)) for s in STATUSES]
            + [str(status.busy), str(status.concurrent), "; ".join(status.messages) or ""]
            for task, variant, status in _cells(summary, summary.statuses)]
    return headers, rows


MATCHED_HEADERS = ["task", "Keras 3 best (bf16)", "Keras 3 ms", "native PyTorch best (bf16)", "native ms",
                   "native / Keras 3 [95% CI]", "speed-up", "rows"]


def matched_table(summaries: list[PresetSummary]) -> list[list[str]]:
    rows = []
    for r in precision_axis.matched_rows(summaries):
        if r.native is None:
            native = [fmt_missing(r.missing), "—", "—", "—"]
        else:
            native = [r.native.label, fmt_ms(r.native_ms),
                      f"{r.ratio.ratio:.2f}x [{r.ratio.low:.2f}–{r.ratio.high:.2f}]", fmt_speedup(r.speedup_pct)]
        rows.append([r.task, r.keras.label, fmt_ms(r.keras_ms), *native, r.rows])
    return rows


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


def published_left_out(summary: PresetSummary) -> str | None:
    """Why the published A100 comparison does not apply to this summary (None: it does): only rows at the published
    sizes (preset paper) measured on a GPU say anything about the published table."""
    if summary.preset != "paper":
        return (f"preset {summary.preset} is not the published sizes: neither its times nor its ranking say "
                "anything about the published A100 table (run --preset paper on a GPU for that)")
    devices = {facts.device for facts in summary.facts.values() if facts.device}
    if devices and devices != {"cuda"}:
        return ("these rows ran on a CPU: CPU times and rankings say nothing about the published GPU table")
    return None


def _published_section(summary: PresetSummary, reference: dict) -> list:
    left_out = published_left_out(summary)
    if left_out:
        return [d.Heading(f"Published numbers ({summary.preset})", 3),
                d.Paragraph(f"Not compared with the published table: {left_out}.", "note")]
    pin_set = published.compared_pin_set(summary)
    blocks = [d.Heading(f"Published numbers ({summary.preset})", 3),
              d.Paragraph(f"Reference: {published.REFERENCE_SOURCE}.", "note"),
              d.Paragraph(f"Compared: rows of the {pin_set} pin set" + (
                  " (the published run's library versions; declared deviations are listed per row)."
                  if pin_set == pins.PUBLISHED_PIN_SET else
                  f" (no {pins.PUBLISHED_PIN_SET} rows: library versions differ from the published run; "
                  f"run with --pin-set {pins.PUBLISHED_PIN_SET} to compare like with like)."),
                  "note" if pin_set == pins.PUBLISHED_PIN_SET else "warning")]
    rows = published.ratios(summary, reference, pin_set)
    if not rows:
        return blocks + [d.Paragraph("No measured cell has a published counterpart.")]
    blocks.append(d.Paragraph("Same sizes as published (preset paper): measured / published median ms per step. "
                              "Hardware may still differ (see provenance); every other known difference from the "
                              "published cell is listed in the last column."))
    blocks.append(d.Table(
        ["task", "variant", "measured ms", "published ms", "measured / published", "batch (ours / published)",
         "pin set", "XLA", "compiled", "published note", "differs from the published cell"],
        [[r.task, r.variant.label, fmt_ms(r.measured_ms), fmt_ms(r.published_ms), f"{r.ratio:.2f}x",
          f"{r.measured_batch} / {r.published_batch}", r.facts.pin_set or "—", _yes_no(r.facts.jit_compile),
          r.facts.compiled_target or "—", r.footnote, "; ".join(r.differences) or "—"] for r in rows],
        css_class="text"))
    ranks = published.rankings(summary, reference, pin_set)
    if ranks:
        blocks += [d.Paragraph("Rank order per task, measured (lowest median first) and published; 'same order' sets "
                               "only the pairs the judge ranks from the measured rows (the interval of their ratio "
                               "excludes 1) against the published order; Kendall tau only when every pair is ranked."),
                   d.Table(["task", "measured order (fastest first)", "published order", "same order",
                            "Kendall tau"],
                           [[_group_name(r.task, r.settings), " < ".join(v.label for v in r.measured_order),
                             " < ".join(v.label for v in r.published_order), r.same_text(),
                             "—" if r.kendall_tau is None else f"{r.kendall_tau:+.2f}"] for r in ranks],
                           css_class="text")]
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
    blocks += [d.Paragraph(note, "note") for note in _no_xla_notes(summary)]
    single = sorted({f"{t} {v.label}" for (t, v), e in summary.estimates.items() if e.repeats == 1})
    if single:
        blocks.append(d.Paragraph(f"{len(single)} cell(s) have a single repeat: their CI only covers step-to-step "
                                  "noise, not process-to-process variation. Use --repeats 3 or more.", "note"))
    if any(v.is_keras3 for v in summary.variants):
        headers, rows = speedup_table(summary)
        blocks += [d.Heading(f"Speed-up of Keras 3 best ({p})", 3),
                   d.Paragraph("As on keras.io: (baseline ms / Keras 3 best ms - 1) x 100%, from medians; "
                               "positive = Keras 3 faster. Each against the baseline with the same settings (a row "
                               "per group of settings when there are several); — (why) where that baseline is "
                               "missing, — where no Keras 3 cell ran ok."),
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
    costs = cost_table(summary)
    if costs:
        blocks += [d.Heading(f"Throughput and cost ({p})", 3),
                   d.Paragraph("Medians over the ok repeats: samples/s = batch / step time (a generate step is one "
                               "whole generate() call: tokens/s counts the new tokens of the whole batch); first "
                               "step = the untimed first (compiling) step; peak memory = the largest of the "
                               "repeats (the allocator's peak on a GPU, the process's peak RSS on a CPU); J/step "
                               "from NVML's energy counter, GPUs only.", "note"),
                   d.Table(COST_HEADERS, costs)]
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
    what = ("They are included in the tables' numbers (--include-busy), never in a ranking or verdict." if include_busy
            else f"Cells with only busy rows show their numbers marked {BUSY_MARK}, left out of rankings, speed-ups and "
            "plots; `fwbench aggregate --include-busy` counts them in the tables' numbers (never in a verdict).")
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


def _headline_note(frame, summaries: list[PresetSummary]) -> list:
    """Which rows the main tables hold, when some are elsewhere (fwbench.core.identity.SECTION_AXES)."""
    off = int((~headline_rows(frame)).sum())
    if not off:
        return []
    where = ("The main tables, Keras 3 best, speed-ups, rankings, plots and the published comparison hold the "
             "headline cells only (one device, the task's batch, no sweep point)" if summaries else
             "No row is a headline cell (one device, the task's batch, no sweep point), so there are no main tables")
    return [d.Paragraph(f"{where}. The {off} row(s) at other device counts, global batches or sweep points are "
                        "compared in their own sections (Data-parallel scaling, Version sweeps), each cell only with "
                        "cells equal in every other setting.", "note")]


def build_document(loaded: LoadedResults, report_dir: Path,
                   include_busy: bool = False) -> tuple[d.Document, list[PresetSummary]]:
    frame = loaded.frame()
    summaries = summarise(model_files.published_rows(frame), include_busy)  # model files: their own section
    reference = published.load_published()
    doc = d.Document("fwbench report")
    doc.add(*what_ran.block(frame))
    doc.add(d.Paragraph(
        f"{len(frame)} rows from {loaded.files_read} result files ({what_ran.schema_versions(frame)}); generated "
        f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC. Merged rows: merged.parquet."),
        d.Paragraph(f"Confidence intervals: {stats.CI_METHOD}. Rankings, ties and every winner come from fwbench's "
                    f"judge: one cell is faster than another only when the 95% interval of their ratio excludes 1 "
                    f"({judge.METHOD_REPEATS} with {judge.MIN_REPEATS}+ repeats a side, else the steps' bootstrap "
                    f"widened by an assumed process-to-process spread of {judge.PROCESS_SPREAD_PRIOR:g} log sd); busy "
                    "rows never decide.", "note"))
    doc.add(*_concurrent_summary(frame))
    doc.add(*_headline_note(frame, summaries))
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
