"""The published keras.io table (package data) and how measured numbers are set against it."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from fwbench.core import pins, registry
from fwbench_aggregator import judge
from fwbench_aggregator.summary import CellFacts, PresetSummary
from fwbench_aggregator.variants import NATIVE_COMPILED, Variant

REFERENCE_FILE = "keras-io-benchmarks-a100.csv"
REFERENCE_VERSION = "v2-2024-04-03"
REFERENCE_SOURCE = ("keras.io 'Keras 3 benchmarks' table (getting_started/benchmarks), page version "
                    f"{REFERENCE_VERSION}, 1x A100 40 GB; code: github.com/haifeng-jin/keras-benchmarks v0.0.5")


@dataclass(frozen=True)
class PublishedCell:
    task: str
    variant: Variant
    batch_size: int
    ms_per_step: float
    footnote: str


def task_id(model: str, kind: str, batch_size: int) -> str:
    """Our task id for a published row (generate rows are told apart by batch size)."""
    return f"{model}-{kind}-bs{batch_size}" if kind == "generate" else f"{model}-{kind}"


def load_published(page_version: str = REFERENCE_VERSION) -> dict[tuple[str, Variant], PublishedCell]:
    # A path next to this module (package data): works in editable and wheel installs alike, where
    # importlib.resources trips over setuptools' editable namespace mapping.
    text = (Path(__file__).parent / "data" / REFERENCE_FILE).read_text(encoding="utf-8")
    cells = {}
    for row in csv.DictReader(io.StringIO(text)):
        if row["page_version"] != page_version:
            continue
        batch = int(row["batch_size"])
        cell = PublishedCell(task_id(row["model"], row["task"], batch), Variant(row["stack"], row["compile"]),
                             batch, float(row["ms_per_step"]), row.get("footnote") or "")
        cells[(cell.task, cell.variant)] = cell
    return cells


def compared_pin_set(summary: PresetSummary) -> str:
    """The pin set whose rows are set against the published table: paper-2024 (the published run's
    versions) whenever the summary has any, else what there is (the report then says so)."""
    found = {facts.pin_set for facts in summary.facts.values() if facts.pin_set}
    if pins.PUBLISHED_PIN_SET in found or not found:
        return pins.PUBLISHED_PIN_SET
    return pins.DEFAULT_PIN_SET if pins.DEFAULT_PIN_SET in found else sorted(found)[0]


def _compared(summary: PresetSummary, task: str, variant: Variant, pin_set: str) -> bool:
    facts = summary.facts.get((task, variant))
    return facts is not None and facts.pin_set == pin_set


# How the published run's compiled native-torch column really ran (keras-benchmarks v0.0.5), by task model and
# kind: where it differs from what fwbench's compiled cells compile, the comparison is not like with like.
_PUBLISHED_COMPILED = {
    ("gemma", "generate"): "published: torch.compile(model) then model.generate ran the uncompiled module",
    ("mistral", "generate"): "published: torch.compile(model) then model.generate ran the uncompiled module",
    ("stable_diffusion", "predict"): "published: torch.compile(pipeline) compiled nothing",
}
_TRAINER_TF32 = "published: TrainingArguments(torch_compile=True) also switched TF32 on"


def differences(task: str, variant: Variant, facts: CellFacts) -> list[str]:
    """Every known way this measured cell differs from the published cell it is set against."""
    notes = []
    if facts.pin_set != pins.PUBLISHED_PIN_SET:
        notes.append(f"library versions of pin set {facts.pin_set or 'unknown'}, not the published ones")
    elif facts.pin_deviations:
        notes.append(f"pin deviations: {facts.pin_deviations}")
    spec = registry.TASKS.get(task)
    if spec is not None and variant.key == NATIVE_COMPILED:
        published_note = _PUBLISHED_COMPILED.get((spec.model, spec.kind))
        if published_note:
            notes.append(f"{published_note}; here: {facts.compiled_target or 'nothing'} compiled")
        elif spec.kind == "fit" and facts.compiled_target and "Trainer" in facts.compiled_target:
            notes.append(f"{_TRAINER_TF32}; here TF32 {'on' if facts.tf32_matmul else 'off'}")
    if spec is not None and spec.kind == "generate" and facts.tokenize_in_step is False:
        notes.append("published timed tokenize/detokenize too; here generate on token ids only")
    if dict(variant.settings).get("jit"):
        notes.append(f"Keras XLA forced {dict(variant.settings)['jit']} (--jit), published per task")
    return notes


@dataclass(frozen=True)
class RatioRow:
    task: str
    variant: Variant
    measured_ms: float
    published_ms: float
    measured_batch: str
    published_batch: int
    footnote: str
    facts: CellFacts = CellFacts()
    differences: tuple[str, ...] = ()

    @property
    def ratio(self) -> float:
        return self.measured_ms / self.published_ms


def ratios(summary: PresetSummary, published: dict, pin_set: str | None = None) -> list[RatioRow]:
    """measured / published per cell of one pin set (default: compared_pin_set); only meaningful at the
    `paper` preset (same sizes)."""
    pin_set = pin_set or compared_pin_set(summary)
    out = []
    for task in summary.tasks:
        for variant in summary.variants:
            est, ref = summary.estimates.get((task, variant)), published.get((task, variant.published))
            if est is None or ref is None or not _compared(summary, task, variant, pin_set):
                continue
            facts = summary.facts[(task, variant)]
            batches = ", ".join(str(b) for b in sorted(summary.batch_sizes.get((task, variant), ())))
            out.append(RatioRow(task, variant, est.median, ref.ms_per_step, batches, ref.batch_size, ref.footnote,
                                facts, tuple(differences(task, variant, facts))))
    return out


@dataclass(frozen=True)
class RankRow:
    task: str
    measured_order: list[Variant]  # lowest median first (the order shown: which pairs are ranked is `ranked_pairs`)
    published_order: list[Variant]
    kendall_tau: float | None  # None unless the judge ranks every pair (a tau over unranked pairs claims too much)
    settings: tuple = ()  # the like-for-like group the variants share (summary.PresetSummary.groups)
    # (faster, slower) for each pair the judge can rank from the measured rows; only these are compared.
    ranked_pairs: tuple[tuple[Variant, Variant], ...] = ()

    @property
    def disagreements(self) -> list[tuple[Variant, Variant]]:
        """Ranked pairs whose published order is the other way."""
        return [(fast, slow) for fast, slow in self.ranked_pairs
                if self.published_order.index(fast) > self.published_order.index(slow)]

    @property
    def same(self) -> bool | None:
        """True when every ranked pair is in the published order, False when one is not, None with no ranked
        pair (nothing measured supports an order)."""
        if not self.ranked_pairs:
            return None
        return not self.disagreements

    def same_text(self) -> str:
        pairs = len(self.measured_order) * (len(self.measured_order) - 1) // 2
        if self.same is None:
            return f"cannot rank (no pair of {pairs} ranked)"
        ranked = f"{len(self.ranked_pairs)} of {pairs} pair(s) ranked"
        if self.same:
            return f"yes ({ranked})"
        wrong = ", ".join(f"{fast.label} < {slow.label}" for fast, slow in self.disagreements)
        return f"no: {wrong} measured, published the other way ({ranked})"


def rankings(summary: PresetSummary, published: dict, pin_set: str | None = None) -> list[RankRow]:
    """Rank order per task and like-for-like group over the variants both sides have, of one pin set (default:
    compared_pin_set) (the only fair comparison across sizes). Only the pairs the judge ranks from the measured
    rows are set against the published order."""
    from scipy.stats import kendalltau  # lazy: scipy is slow to import

    pin_set = pin_set or compared_pin_set(summary)
    out = []
    for task, settings in ((t, s) for t in summary.tasks for s in summary.groups(t)):
        common = [v for v, _ in summary.ranked(task, settings)
                  if (task, v.published) in published and _compared(summary, task, v, pin_set)]
        if len(common) < 2:
            continue
        pairs = judge.ordered_pairs({v: summary.quiet_samples[(task, v)] for v in common})
        published_order = sorted(common, key=lambda v: published[(task, v.published)].ms_per_step)
        tau = None
        if len(pairs) == len(common) * (len(common) - 1) // 2:
            measured_ranks = list(range(len(common)))
            published_ranks = [published_order.index(v) for v in common]
            tau = float(kendalltau(measured_ranks, published_ranks).statistic)
        out.append(RankRow(task, common, published_order, tau, settings, tuple(pairs)))
    return out
