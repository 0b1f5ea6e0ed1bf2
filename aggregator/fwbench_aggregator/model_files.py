"""The report's "Your models" section: for each model file (`fwbench run --model`) and task, its backends ranked.

A model file's rows (those with a model_sha256) are kept out of the published cells' tables (split) and shown here,
one table per file, task kind, batch and settings: every backend that ran it, fastest first, each with its median
ms/step and 95% interval (fwbench_aggregator.stats, as everywhere in the report), how many times slower than the
fastest it is (a ratio of medians with its interval), and the first step (trace/compile) and build apart from the
steps. Backends whose intervals overlap too much to be told apart (the Cumming & Finch rule of the noise warnings) are
said to be so. Cells that did not run ok are listed with their status and the first line of their error. Busy rows
are left out of the ranking unless --include-busy, as in the rest of the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from fwbench.core import registry
from fwbench.core.identity import CellIdentity
from fwbench_aggregator import document as d
from fwbench_aggregator import stats
from fwbench_aggregator.stats import fmt_estimate, fmt_ms
from fwbench_aggregator.marks import BUSY_MARK

# Settings that do not split a model's table: a backend's jit_compile and steps_per_execution are its own (its
# label says them; the twin runs one step a call).
_SAME_TABLE = ("jit", "steps_per_execution")


def is_model_row(frame: pd.DataFrame) -> pd.Series:
    if "model_sha256" not in frame:
        return pd.Series(False, index=frame.index)
    return frame["model_sha256"].notna()


def published_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of fwbench's own tasks (the published cells): everything but model files'."""
    return frame[~is_model_row(frame)]


@dataclass
class Backend:
    """One backend's rows of one model-file table."""

    label: str
    rows: pd.DataFrame
    estimate: stats.Estimate | None = None
    samples: list = field(default_factory=list)
    busy_only: bool = False

    def first(self, column: str):
        ok = self.rows[self.rows["status"] == "ok"] if "status" in self.rows else self.rows
        values = ok[column].dropna() if column in ok else []
        return values.iloc[0] if len(values) else None

    def median_of(self, column: str) -> float | None:
        ok = self.rows[self.rows["status"] == "ok"]
        values = ok[column].dropna() if column in ok else []
        return stats.median(values) if len(values) else None


@dataclass
class ModelTable:
    model: str  # the file's name
    sha256: str
    kind: str
    batch: int
    identity: CellIdentity  # of its first row: preset and settings
    backends: list[Backend]

    @property
    def ranked(self) -> list[Backend]:
        return sorted((b for b in self.backends if b.estimate is not None and not b.busy_only),
                      key=lambda b: b.estimate.median)


def backend_label(row: dict) -> str:
    """'keras3-jax (XLA)', 'keras3-jax (XLA, 4 steps/execution)', 'keras3-torch (eager)', 'native-torch (eager)',
    'native-torch (reduce-overhead)'."""
    stack = registry.STACKS.get(row["stack"])
    if stack is not None and stack.family == "keras":
        jit = row.get("jit_compile")
        how = "XLA" if jit is True else "eager" if jit is False else row["compile_mode"]
        per_call = row.get("steps_per_execution")
        if isinstance(per_call, (int, float)) and per_call == per_call and per_call > 1:  # not missing (NaN)
            how += f", {int(per_call)} steps/execution"
    else:
        how = "eager" if row["compile_mode"] == "none" else row["compile_mode"]
    return f"{row['stack']} ({how})"


def table_key(row: dict) -> tuple:
    """The rows of one model table: the same task (file, kind, batch), preset and every identity setting but those
    a backend has of its own (_SAME_TABLE); the stack and compile mode are the table's rows."""
    identity = CellIdentity.of_row(row)
    return identity.task, identity.preset, tuple((k, v) for k, v in identity.settings if k not in _SAME_TABLE)


def tables(frame: pd.DataFrame, include_busy: bool = False) -> list[ModelTable]:
    rows = frame[is_model_row(frame)]
    groups: dict[tuple, list[dict]] = {}
    for row in rows.to_dict("records"):
        groups.setdefault(table_key(row), []).append(row)
    found = []
    for (task, _, _), members in groups.items():
        first = members[0]
        by_backend: dict[str, list[dict]] = {}
        for row in members:
            by_backend.setdefault(backend_label(row), []).append(row)
        backends = [_backend(label, pd.DataFrame(group), include_busy) for label, group in by_backend.items()]
        parsed = registry.model_file_task(task)
        found.append(ModelTable(str(first.get("model") or parsed.model), str(first["model_sha256"]), parsed.kind,
                                int(parsed.batch["tiny"]), CellIdentity.of_row(first), backends))
    return sorted(found, key=lambda t: (t.model, t.sha256, t.kind != "fit", t.batch, t.identity.preset))


def _backend(label: str, rows: pd.DataFrame, include_busy: bool) -> Backend:
    backend = Backend(label, rows)
    ok = rows[rows["status"] == "ok"]
    busy = ok["busy"].fillna(False).astype(bool) if "busy" in ok else pd.Series(False, index=ok.index)
    chosen = ok if include_busy else ok[~busy]
    if chosen.empty and not ok.empty:  # only busy rows: shown, marked, never ranked
        chosen, backend.busy_only = ok, True
    if not chosen.empty:
        backend.samples = [stats.repeat_samples(s, m) for s, m in zip(chosen["step_ms"], chosen["ms_per_step"])]
        backend.estimate = stats.estimate(backend.samples)
    return backend


HEADERS = ["rank", "backend", "ms/step [95% CI]", "x fastest [95% CI]", "first step s (compile)", "build s",
           "samples/s", "peak memory MB", "TFLOP/s", "trainable params", "status"]


def table_rows(table: ModelTable) -> list[list[str]]:
    ranked = table.ranked
    best = ranked[0] if ranked else None
    out = []
    for backend in ranked + [b for b in table.backends if b not in ranked]:
        est = backend.estimate
        if backend in ranked:
            rank = str(ranked.index(backend) + 1)
            ratio = "fastest" if backend is best else _ratio(backend, best)
        else:
            rank, ratio = "—", "—"
        shown = "—" if est is None else fmt_estimate(est) + (f"\u00a0{BUSY_MARK}" if backend.busy_only else "")
        out.append([rank, backend.label, shown, ratio, _num(backend.median_of("first_step_s"), 3),
                    _num(backend.median_of("setup_s"), 3), _num(backend.median_of("samples_per_s"), 4),
                    _num(_mb(backend.median_of("peak_mem_bytes")), 4), _num(backend.median_of("achieved_tflops"), 3),
                    _count(backend.first("params_trainable")), _statuses(backend.rows)])
    return out


def _ratio(backend: Backend, best: Backend) -> str:
    ratio = stats.ratio_estimate(backend.samples, best.samples)
    return f"x{ratio.ratio:.2f} [{ratio.low:.2f}–{ratio.high:.2f}]"


def verdict(table: ModelTable) -> str:
    """One sentence: the fastest backend, by how much, and which it cannot be told apart from."""
    ranked = table.ranked
    if not ranked:
        return "No backend ran ok" + (" on a quiet machine (busy rows only: see ⚠)." if any(
            b.busy_only for b in table.backends) else ".")
    best = ranked[0]
    if len(ranked) == 1:
        return f"Only {best.label} ran ok: {fmt_ms(best.estimate.median)} ms/step; nothing to rank it against."
    tied = [b.label for b in ranked[1:] if stats.cis_overlap_too_much(best.estimate, b.estimate)]
    runner_up = ranked[1]
    ratio = stats.ratio_estimate(runner_up.samples, best.samples)
    text = (f"Fastest: {best.label} at {fmt_ms(best.estimate.median)} ms/step, x{ratio.ratio:.2f} "
            f"[{ratio.low:.2f}–{ratio.high:.2f}] faster than the next, {runner_up.label}")
    if tied:
        text += f"; but its interval overlaps too much with {', '.join(tied)}'s to rank them apart"
    return text + "."


def _statuses(rows: pd.DataFrame) -> str:
    counts = rows["status"].value_counts()
    return ", ".join(f"{count} {status}" for status, count in counts.items())


def _num(value, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def _mb(value):
    return None if value is None else value / 1e6


def _count(value) -> str:
    return "—" if value is None else f"{int(value):,}"


def failures(table: ModelTable) -> list[str]:
    lines = []
    for backend in table.backends:
        failed = backend.rows[backend.rows["status"] != "ok"]
        for row in failed.to_dict("records"):
            message = str(row.get("error_message") or "").strip().splitlines()
            lines.append(f"{backend.label} r{int(row['repeat'])}: {row['status']}: "
                         f"{message[0][:300] if message else row.get('error_type') or ''}")
    return lines


def twin_lines(table: ModelTable) -> list[str]:
    """Whether each PyTorch twin has the Keras model's trainable parameters: against the Keras rows of this table,
    else against the count the twin's own rows were checked against (twin_params_keras)."""
    every = pd.concat([b.rows for b in table.backends])
    keras = sorted({int(c) for c in every.loc[every["stack"].map(_is_keras), "params_trainable"].dropna()})
    lines = []
    for backend in table.backends:
        twin = backend.rows[~backend.rows["stack"].map(_is_keras)]
        counts = sorted({int(c) for c in twin["params_trainable"].dropna()})
        against = keras or sorted({int(c) for c in twin.get("twin_params_keras", pd.Series(dtype=float)).dropna()})
        if not counts or not against:
            continue
        if counts == against:
            lines.append(f"{backend.label}: the PyTorch twin has the Keras model's {against[0]:,} trainable parameters")
        else:
            lines.append(f"{backend.label}: the PyTorch twin has {_counts(counts)} trainable parameters, the Keras "
                         f"model {_counts(against)}: not the same model, so its times are not the Keras model's")
    return lines


def _counts(values: list[int]) -> str:
    return ", ".join(f"{value:,}" for value in values)


def _is_keras(stack_id: str) -> bool:
    stack = registry.STACKS.get(stack_id)
    return stack is not None and stack.family == "keras"


def blocks(frame: pd.DataFrame, include_busy: bool = False) -> list:
    found = tables(frame, include_busy)
    if not found:
        return []
    out = [d.Heading("Your models"),
           d.Paragraph("Model files run with `fwbench run --model` (docs/your-model.md), each on every backend that ran "
                       "it: fastest first, median ms per step [95% CI] (" + stats.CI_METHOD + "), and how many times "
                       "slower than the fastest each is (ratio of medians [95% CI]). The first step (trace and "
                       "compile) and the build are apart, never in ms/step. Which backend is fastest depends on the "
                       "model, the task, the batch and the device: these numbers say it for this one.", "note")]
    for table in found:
        identity = table.identity
        out.append(d.Heading(f"{table.model}: {table.kind}, batch {table.batch}", 3))
        out.append(d.Paragraph(
            f"File SHA-256 {table.sha256[:12]}…; preset {identity.preset} (steps and warm-up: "
            f"{identity.setting('steps')} timed after {identity.setting('warmup')}); precision "
            f"{identity.setting('precision')}; {identity.setting('threads')} thread(s); device "
            f"{identity.setting('device_model')}.", "note"))
        out.append(d.Paragraph(verdict(table)))
        out.append(d.Table(HEADERS, table_rows(table)))
        if any(b.estimate is not None and b.estimate.repeats == 1 for b in table.backends):
            out.append(d.Paragraph("A backend with a single repeat has an interval of step-to-step noise only, not of "
                                   "process-to-process variation: use --repeats 3 or more before ranking on it.",
                                   "note"))
        if any(b.busy_only for b in table.backends):
            out.append(d.Paragraph(f"{BUSY_MARK} only busy rows (something competed with the cell): shown, not "
                                   "ranked; `fwbench aggregate --include-busy` ranks them.", "note"))
        twins = twin_lines(table)
        if twins:
            out.append(d.BulletList(twins, "warning" if any("not the same" in t for t in twins) else "note"))
        failed = failures(table)
        if failed:
            out.append(d.BulletList(failed, "warning"))
    return out
