"""The report's "Your models" section: for each model file (`fwbench run --model`) and task, its backends ranked.

A model file's rows (those with a model_sha256) are kept out of the published cells' tables (split) and shown here,
one table per file, task kind, batch and settings: every cell that ran it (one per backend, setting and environment:
never pooled under one label), lowest median first, each with its median ms/step and 95% interval
(fwbench_aggregator.stats, as everywhere in the report), its ratio to the fastest with the judge's interval, and the
first step (trace/compile) and build apart from the steps. The judge (fwbench_aggregator.judge) names a winner only
where the interval of each ratio excludes 1, else says which backends it cannot rank apart. Cells that did not run ok
are listed with their status and the first line of their error. Busy rows never rank (--include-busy shows their
numbers in the estimates).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import pandas as pd

from fwbench.core import registry
from fwbench.core.identity import CellIdentity, describe
from fwbench_aggregator import document as d
from fwbench_aggregator import judge, stats
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
    quiet_samples: list = field(default_factory=list)  # quiet ok rows only: what the judge ranks

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
    title_settings: str = ""  # the settings that tell this table from another of the same file, kind and batch

    @functools.cached_property
    def ranking(self) -> judge.Ranking | None:
        """The judge's ranking of the backends with quiet rows (busy rows never decide); once a table (its rows,
        verdict and ranks all read it)."""
        return judge.rank({b.label: b.quiet_samples for b in self.backends if b.quiet_samples})

    @property
    def ranked(self) -> list[Backend]:
        """The backends with quiet rows in the judge's order (lowest median first)."""
        ranking = self.ranking
        by_label = {b.label: b for b in self.backends}
        return [] if ranking is None else [by_label[label] for label in ranking.order]


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
    """One table per file, task, preset and settings; its backends are its cells, one per full identity and
    environment (rows that differ in a setting or an environment fact are never pooled under one label)."""
    rows = frame[is_model_row(frame)]
    groups: dict[tuple, list[dict]] = {}
    for row in rows.to_dict("records"):
        groups.setdefault(table_key(row), []).append(row)
    found = []
    for (task, _, _), members in groups.items():
        first = members[0]
        by_cell: dict[CellIdentity, list[dict]] = {}
        for row in members:
            by_cell.setdefault(CellIdentity.of_row(row), []).append(row)
        cells = []
        for identity, cell_rows in by_cell.items():
            part_labels, part_of = judge.environment_part_of(cell_rows)
            # A row that did not run ok joins the part of its environment, else the first part (nothing is dropped).
            placed: list[list[dict]] = [[] for _ in part_labels]
            for row, part in zip(cell_rows, part_of):
                placed[part or 0].append(row)
            cells += [(identity, environment, part) for environment, part in zip(part_labels, placed)]
        labels = _backend_labels(cells)
        backends = [_backend(label, pd.DataFrame(part), include_busy) for label, (_, _, part) in zip(labels, cells)]
        parsed = registry.model_file_task(task)
        found.append(ModelTable(str(first.get("model") or parsed.model), str(first["model_sha256"]), parsed.kind,
                                int(parsed.batch["tiny"]), CellIdentity.of_row(first), backends))
    _title_settings(found)
    return sorted(found, key=lambda t: (t.model, t.sha256, t.kind != "fit", t.batch, t.identity.preset,
                                        t.title_settings))


def _backend_labels(cells: list[tuple[CellIdentity, str, list[dict]]]) -> list[str]:
    """backend_label, plus the settings of _SAME_TABLE that differ and the environment, where two cells would
    otherwise share a label ('keras3-jax (XLA, jit=on)' beside 'keras3-jax (XLA)')."""
    base = [backend_label(part[0]) for _, _, part in cells]
    labels = []
    for index, (identity, environment, _) in enumerate(cells):
        label = base[index]
        twins = [cells[i][0] for i in range(len(cells)) if base[i] == label and i != index]
        if twins:
            named = [describe(((name, identity.setting(name)),)) for name in _SAME_TABLE
                     if any(t.setting(name) != identity.setting(name) for t in twins)]
            named += [environment] if environment else []
            label = label[:-1] + ", " + ", ".join(named) + ")" if named else label
        labels.append(label)
    return labels


def _title_settings(found: list[ModelTable]) -> None:
    """Tables of one file, kind and batch that differ in a setting (devices, device, threads...) say which."""
    by_title: dict[tuple, list[ModelTable]] = {}
    for table in found:
        by_title.setdefault((table.model, table.sha256, table.kind, table.batch), []).append(table)
    for tables_ in by_title.values():
        if len(tables_) < 2:
            continue
        settings = [dict(t.identity.settings) | {"preset": t.identity.preset} for t in tables_]
        varying = [name for name in settings[0] if name not in _SAME_TABLE
                   and len({str(s.get(name)) for s in settings}) > 1]
        for table, values in zip(tables_, settings):
            table.title_settings = describe(tuple((name, values[name]) for name in varying))


def _backend(label: str, rows: pd.DataFrame, include_busy: bool) -> Backend:
    backend = Backend(label, rows)
    ok = rows[rows["status"] == "ok"]
    quiet, _ = judge.quiet(ok)
    chosen = ok if include_busy else quiet
    if chosen.empty and not ok.empty:  # only busy rows: shown, marked, never ranked
        chosen, backend.busy_only = ok, True
    if not quiet.empty:
        backend.quiet_samples = [stats.repeat_samples(s, m) for s, m in zip(quiet["step_ms"], quiet["ms_per_step"])]
    if not chosen.empty:
        backend.samples = [stats.repeat_samples(s, m) for s, m in zip(chosen["step_ms"], chosen["ms_per_step"])]
        backend.estimate = stats.estimate(backend.samples)
    return backend


HEADERS = ["rank", "backend", "ms/step [95% CI]", "x fastest [95% CI]", "first step s (compile)", "build s",
           "samples/s", "peak memory MB", "TFLOP/s", "trainable params", "status"]


def table_rows(table: ModelTable) -> list[list[str]]:
    ranking = table.ranking
    ranked = table.ranked
    out = []
    for backend in ranked + [b for b in table.backends if b not in ranked]:
        est = backend.estimate
        if backend in ranked:
            rank = str(ranked.index(backend) + 1)
            ratio = "fastest" if backend is ranked[0] else ranking.against_fastest[backend.label].text()
        else:
            rank, ratio = "—", "—"
        shown = "—" if est is None else fmt_estimate(est) + (f"\u00a0{BUSY_MARK}" if backend.busy_only else "")
        out.append([rank, backend.label, shown, ratio, _num(backend.median_of("first_step_s"), 3),
                    _num(backend.median_of("setup_s"), 3), _num(backend.median_of("samples_per_s"), 4),
                    _num(_mb(backend.median_of("peak_mem_bytes")), 4), _num(backend.median_of("achieved_tflops"), 3),
                    _count(backend.first("params_trainable")), _statuses(backend.rows)])
    return out


def verdict(table: ModelTable) -> str:
    """One sentence: the judge's winner and by how much, or the backends it cannot rank apart."""
    ranking = table.ranking
    if ranking is None:  # busy rows only (shown marked, or counted in with --include-busy), or no ok row at all
        ran_busy = any(b.estimate is not None for b in table.backends)
        return "No backend ran ok" + (" on a quiet machine (busy rows only, which never rank)." if ran_busy else ".")
    by_label = {b.label: b for b in table.backends}
    fastest = by_label[ranking.order[0]]
    if len(ranking.order) == 1:
        return f"Only {fastest.label} ran ok: {fmt_ms(fastest.estimate.median)} ms/step; nothing to rank it against."
    if ranking.winner is not None:
        runner_up = ranking.order[1]
        return (f"Fastest: {fastest.label} at {fmt_ms(fastest.estimate.median)} ms/step, "
                f"{ranking.against_fastest[runner_up].text()} faster than the next, {runner_up}.")
    word = "Tie" if ranking.tied else "Cannot rank"
    others = ", ".join(f"{label} {ranking.against_fastest[label].text()}" for label in ranking.not_ranked[1:])
    return (f"{word}: {fastest.label} has the lowest median ({fmt_ms(fastest.estimate.median)} ms/step), but the "
            f"interval of its ratio to {others} reaches across 1 ({ranking.against_fastest[ranking.not_ranked[1]].method}).")


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
                       "it: lowest median first, median ms per step [95% CI] (" + stats.CI_METHOD + "), and each one's "
                       "ratio to the fastest with its 95% interval (fwbench's judge: Welch t on log repeat medians "
                       "from 3 repeats a side, else the steps' bootstrap widened by an assumed process spread); a "
                       "winner is named only where every such interval lies above 1. The first step (trace and "
                       "compile) and the build are apart, never in ms/step. Which backend is fastest depends on the "
                       "model, the task, the batch and the device: these numbers say it for this one.", "note")]
    for table in found:
        identity = table.identity
        title = f"{table.model}: {table.kind}, batch {table.batch}"
        out.append(d.Heading(f"{title} ({table.title_settings})" if table.title_settings else title, 3))
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
                                   "ranked (busy rows never decide; `fwbench aggregate --include-busy` shows their numbers).", "note"))
        twins = twin_lines(table)
        if twins:
            out.append(d.BulletList(twins, "warning" if any("not the same" in t for t in twins) else "note"))
        failed = failures(table)
        if failed:
            out.append(d.BulletList(failed, "warning"))
    return out
