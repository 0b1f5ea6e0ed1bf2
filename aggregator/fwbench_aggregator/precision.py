"""The precision axis in the report: which precision a row ran at (its `precision` setting), per-precision tables,
and Keras 3 best against native PyTorch at matched (bf16) precision.

A row's precision is its `precision` column (schema v7: published, fp32, tf32, bf16, fp16). Older rows have none
and read by their TF32 setting: default -> published (each cell as the published run ran it), on -> tf32,
off -> fp32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import pandas as pd

from fwbench.core import precision as core_precision
from fwbench_aggregator import stats
from fwbench_aggregator.variants import Variant

PUBLISHED = core_precision.DEFAULT_PRECISION
PRECISIONS = core_precision.PRECISIONS  # table order
FILE_TOKENS = {p: p for p in PRECISIONS}  # plot file names: the fixed names, never a row's string
MATCHED = "bf16"  # the precision at which Keras 3 best and native PyTorch are set side by side
NATIVE_STACK = "native-torch"


def row_precision(row: Mapping[str, Any]) -> str:
    """The precision a row was asked to run at: its `precision` column, else what its TF32 setting means (the one
    rule of the cell identity, fwbench.core.precision.of_row)."""
    return core_precision.of_row(row)


def precision_column(frame: pd.DataFrame) -> pd.Series:
    return pd.Series([row_precision(row) for row in frame.to_dict("records")], index=frame.index, dtype=object)


def ordered(precisions) -> list[str]:
    found = set(precisions)
    return [p for p in PRECISIONS if p in found] + sorted(found - set(PRECISIONS))


def ran_in(dtype_facts: tuple[str | None, str | None], half: str) -> bool:
    """Did a cell's matmuls compute in `half` ("bfloat16")? Its compute_dtype, else (older rows) its dtype."""
    compute_dtype, dtype = dtype_facts
    return half in str(compute_dtype if compute_dtype else dtype or "")


@dataclass(frozen=True)
class MatchedRow:
    task: str
    keras: Variant
    keras_ms: float
    native: Variant
    native_ms: float
    ratio: stats.RatioEstimate  # native ms / Keras 3 ms (> 1: Keras 3 faster)
    rows: str  # which rows: the bf16 setting's, or the published setting's that ran bf16

    @property
    def speedup_pct(self) -> float:
        return (self.ratio.ratio - 1) * 100


def _native_best(summary, task: str, settings: tuple) -> tuple[Variant, stats.Estimate] | None:
    """The fastest native-torch compile mode of a task, among the variants with the Keras side's settings (else,
    when every native-torch variant shares one set of settings, among those)."""
    native = [(v, e) for (t, v), e in summary.estimates.items() if t == task and v.stack == NATIVE_STACK]
    same = [(v, e) for v, e in native if v.settings == settings]
    if not same and len({v.settings for v, _ in native}) == 1:
        same = native
    return min(same, key=lambda item: item[1].median) if same else None


def _matched(summary, task: str, rows: str, require_bf16: bool) -> MatchedRow | None:
    best = summary.keras3_best(task)
    if best is None:
        return None
    native = _native_best(summary, task, best[0].settings)
    if native is None:
        return None
    if require_bf16 and not all(ran_in(summary.dtypes.get((task, v), (None, None)), "bfloat16")
                                for v in (best[0], native[0])):
        return None
    ratio = stats.ratio_estimate(summary.samples[(task, native[0])], summary.samples[(task, best[0])])
    return MatchedRow(task, best[0], best[1].median, native[0], native[1].median, ratio, rows)


def matched_rows(summaries: list) -> list[MatchedRow]:
    """Per task of one preset: Keras 3 best vs native PyTorch's best compile mode, both at bf16. From the rows run
    with the bf16 precision setting; for a task without both there, from the published setting's rows when both
    cells ran in bfloat16 (the LLM tasks, which the published run ran in bf16). Busy rows are left out (they are
    in no estimate)."""
    by_precision = {s.precision: s for s in summaries}
    out: dict[str, MatchedRow] = {}
    if MATCHED in by_precision:
        for task in by_precision[MATCHED].tasks:
            row = _matched(by_precision[MATCHED], task, "bf16 setting", require_bf16=False)
            if row is not None:
                out[task] = row
    if PUBLISHED in by_precision:
        for task in by_precision[PUBLISHED].tasks:
            if task not in out:
                row = _matched(by_precision[PUBLISHED], task, "published setting (ran bf16)", require_bf16=True)
                if row is not None:
                    out[task] = row
    tasks = [t for s in summaries for t in s.tasks]
    return [out[t] for t in dict.fromkeys(tasks) if t in out]
