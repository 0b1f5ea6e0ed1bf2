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
    native: Variant | None  # None: no like-for-like native PyTorch cell (`missing` says why)
    native_ms: float | None
    ratio: stats.RatioEstimate | None  # native ms / Keras 3 ms (> 1: Keras 3 faster)
    rows: str  # which rows: the bf16 setting's, or the published setting's that ran bf16
    missing: str = ""

    @property
    def speedup_pct(self) -> float | None:
        return None if self.ratio is None else (self.ratio.ratio - 1) * 100


def _native_best(summary, task: str, settings: tuple) -> tuple[Variant, stats.Estimate] | None:
    """The fastest native-torch compile mode of a task in the Keras side's like-for-like group."""
    native = [(v, summary.estimates[(task, v)]) for v in summary.groups(task).get(settings, ())
              if v.stack == NATIVE_STACK and (task, v) in summary.estimates]
    return min(native, key=lambda item: item[1].median) if native else None


def _ran_bf16(summary, task: str, variant: Variant) -> bool:
    return ran_in(summary.dtypes.get((task, variant), (None, None)), "bfloat16")


def _matched(summary, task: str, settings: tuple, rows: str, require_bf16: bool) -> MatchedRow | None:
    keras, keras_estimate = summary.keras3_best(task, settings)
    if require_bf16 and not _ran_bf16(summary, task, keras):
        return None
    native = _native_best(summary, task, settings)
    if native is None:
        return MatchedRow(task, keras, keras_estimate.median, None, None, None, rows,
                          summary.missing(task, settings, NATIVE_STACK))
    if require_bf16 and not _ran_bf16(summary, task, native[0]):
        return None
    ratio = stats.ratio_estimate(summary.samples[(task, native[0])], summary.samples[(task, keras)])
    return MatchedRow(task, keras, keras_estimate.median, native[0], native[1].median, ratio, rows)


def matched_rows(summaries: list) -> list[MatchedRow]:
    """Per task of one preset and like-for-like group: Keras 3 best vs native PyTorch's best compile mode, both at
    bf16. From the rows run with the bf16 precision setting; for a task without both there, from the published
    setting's rows when both cells ran in bfloat16 (the LLM tasks, which the published run ran in bf16). A Keras 3
    best without a native PyTorch cell of its group is a row that says why. Busy rows are left out (they are in no
    estimate)."""
    by_precision = {s.precision: s for s in summaries}
    out: dict[tuple[str, tuple], MatchedRow] = {}
    for precision, rows, require_bf16 in ((MATCHED, "bf16 setting", False),
                                          (PUBLISHED, "published setting (ran bf16)", True)):
        summary = by_precision.get(precision)
        for task in summary.tasks if summary else ():
            for settings in summary.keras3_groups(task):
                found = out.get((task, settings))
                if found is not None and found.native is not None:
                    continue  # the bf16 setting's pair stands
                row = _matched(summary, task, settings, rows, require_bf16)
                if row is not None and (found is None or row.native is not None):
                    out[(task, settings)] = row
    tasks = list(dict.fromkeys(t for s in summaries for t in s.tasks))
    return sorted(out.values(), key=lambda r: tasks.index(r.task))
