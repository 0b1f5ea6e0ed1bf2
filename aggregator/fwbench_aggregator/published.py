"""The published keras.io table (package data) and how measured numbers are set against it."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from fwbench_aggregator.summary import PresetSummary
from fwbench_aggregator.variants import Variant

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


@dataclass(frozen=True)
class RatioRow:
    task: str
    variant: Variant
    measured_ms: float
    published_ms: float
    measured_batch: str
    published_batch: int
    footnote: str

    @property
    def ratio(self) -> float:
        return self.measured_ms / self.published_ms


def ratios(summary: PresetSummary, published: dict) -> list[RatioRow]:
    """measured / published per cell; only meaningful at the `paper` preset (same sizes)."""
    out = []
    for task in summary.tasks:
        for variant in summary.variants:
            est, ref = summary.estimates.get((task, variant)), published.get((task, variant.published))
            if est is None or ref is None:
                continue
            batches = ", ".join(str(b) for b in sorted(summary.batch_sizes.get((task, variant), ())))
            out.append(RatioRow(task, variant, est.median, ref.ms_per_step, batches, ref.batch_size, ref.footnote))
    return out


@dataclass(frozen=True)
class RankRow:
    task: str
    measured_order: list[Variant]
    published_order: list[Variant]
    kendall_tau: float | None

    @property
    def same(self) -> bool:
        return self.measured_order == self.published_order


def rankings(summary: PresetSummary, published: dict) -> list[RankRow]:
    """Rank order per task over the variants both sides have (the only fair comparison across sizes)."""
    from scipy.stats import kendalltau  # lazy: scipy is slow to import

    out = []
    for task in summary.tasks:
        common = [v for v, _ in summary.ranked(task) if (task, v.published) in published]
        if len(common) < 2:
            continue
        published_order = sorted(common, key=lambda v: published[(task, v.published)].ms_per_step)
        measured_ranks = list(range(len(common)))
        published_ranks = [published_order.index(v) for v in common]
        tau = float(kendalltau(measured_ranks, published_ranks).statistic)
        out.append(RankRow(task, common, published_order, tau))
    return out
