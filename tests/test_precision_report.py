"""The report's precision axis: a table per precision, Keras 3 best vs native PyTorch at bf16, the stability
section, and the `diverged` status. Rows are written and read with the real writer and loader; the schema v7
columns (precision, compute_dtype, loss scaling) are added to the loaded rows where the schema lacks them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from fwbench_aggregator import document as d
from fwbench_aggregator import loading, precision, report, stability, stats
from fwbench_aggregator.summary import summarise
from tests.aggregator_rows import CENTRES, record, samples, write, write_matrix

BF16 = {("keras3-jax", "xla", "bert-fit"): 12.0, ("keras3-tensorflow", "xla", "bert-fit"): 10.0,
        ("native-torch", "none", "bert-fit"): 30.0, ("native-torch", "reduce-overhead", "bert-fit"): 15.0}


def _frame(tmp_path, centres, **columns) -> pd.DataFrame:
    write_matrix(tmp_path, centres, repeats=3, steps=10, seed=len(columns))
    frame = loading.load_results([tmp_path]).frame()
    return frame.assign(**columns)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> pd.DataFrame:
    """The published matrix (no precision column: pre-v7 rows) plus bert-fit at bf16."""
    root = tmp_path_factory.mktemp("precision")
    published = _frame(root / "published", CENTRES)
    published = published.assign(precision=None, compute_dtype=None)
    bf16 = _frame(root / "bf16", BF16, precision="bf16", compute_dtype="bfloat16")
    bf16["record_id"] = bf16["record_id"] + "-bf16"
    return pd.concat([published, bf16], ignore_index=True)


def _document(frame: pd.DataFrame, report_dir):
    loaded = loading.LoadedResults(pa.Table.from_pandas(frame, preserve_index=False), 1)
    doc, summaries = report.build_document(loaded, report_dir)
    return d.to_markdown(doc, report_dir), d.to_html(doc), summaries


def _table_after(md: str, heading: str) -> list[str]:
    part = md.split(heading + "\n", 1)[1]
    return ("| task" + part.split("\n\n| task", 1)[1]).split("\n\n")[0].splitlines()


@pytest.mark.parametrize("row, expected", [
    ({"precision": "bf16", "tf32_setting": "on"}, "bf16"),
    ({"precision": None, "tf32_setting": "on"}, "tf32"),
    ({"tf32_setting": "off"}, "fp32"),
    ({"tf32_setting": "default"}, "published"),
    ({"precision": float("nan"), "tf32_setting": None}, "published"),
])
def test_a_rows_precision_is_its_column_else_its_tf32_setting(row, expected):
    assert precision.row_precision(row) == expected


def test_each_precision_has_its_own_table(mixed, tmp_path):
    md, html, summaries = _document(mixed, tmp_path)
    assert [(s.preset, s.precision) for s in summaries] == [("tiny", "published"), ("tiny", "bf16")]
    published, bf16 = summaries
    assert {t for t, _ in bf16.estimates} == {"bert-fit"} and len(bf16.estimates) == 4
    assert len(published.estimates) == len(CENTRES)  # the bf16 rows are in no published estimate
    assert "### ms per step (tiny)\n" in md and "### ms per step (tiny, bf16)\n" in md
    assert "Precision bf16: bfloat16 compute" in md and "One ms/step table per precision: published, bf16" in md
    bf16_header = _table_after(md, "### ms per step (tiny, bf16)")[0]
    assert "keras2-tensorflow" not in bf16_header and "native-torch [reduce-overhead]" in bf16_header
    assert md.count("### Published numbers") == 1  # only the published setting is set against keras.io
    assert (tmp_path / "ms_per_step-tiny-bf16.png").is_file() and (tmp_path / "ms_per_step-tiny.png").is_file()
    assert "ms per step (tiny, bf16)" in html


def test_rows_of_older_schemas_split_by_their_tf32_setting(tmp_path):
    write(tmp_path / "res" / "a", record("native-torch", "bert-fit", step_ms=[10.0, 11.0, 12.0]))
    write(tmp_path / "res" / "b", record("native-torch", "bert-fit", step_ms=[8.0, 9.0, 8.5], tf32_setting="on"))
    frame = loading.load_results([tmp_path / "res"]).frame()
    assert [s.precision for s in summarise(frame)] == ["published", "tf32"]


def test_keras3_best_vs_native_torch_at_bf16(mixed, tmp_path):
    (published, bf16) = summarise(mixed)
    (row,) = precision.matched_rows([published, bf16])
    assert row.task == "bert-fit" and row.rows == "bf16 setting"
    assert row.keras.stack == "keras3-tensorflow" and row.native.compile_mode == "reduce-overhead"
    expected = bf16.estimates[("bert-fit", row.native)].median / bf16.estimates[("bert-fit", row.keras)].median
    assert row.ratio.ratio == pytest.approx(expected) and row.ratio.low < expected < row.ratio.high
    assert 1.2 < row.ratio.ratio < 1.8 and row.speedup_pct == pytest.approx((expected - 1) * 100)
    md, _, _ = _document(mixed, tmp_path)
    table = _table_after(md, "### Keras 3 best vs native PyTorch at bf16 (tiny)")
    assert table[0].startswith("| task | Keras 3 best (bf16)") and len(table) == 3
    assert table[2].startswith("| bert-fit | keras3-tensorflow [xla]") and f"{expected:.2f}x [" in table[2]


def test_the_matched_table_leaves_busy_rows_out(tmp_path):
    frame = _frame(tmp_path, BF16, precision="bf16", compute_dtype="bfloat16")
    frame.loc[frame["stack"] == "keras3-tensorflow", "busy"] = True
    (row,) = precision.matched_rows(summarise(frame))
    assert row.keras.stack == "keras3-jax"


def test_published_rows_that_ran_bf16_stand_in_for_a_task_without_bf16_rows(tmp_path):
    """The LLM tasks ran bf16 in the published setting: their published rows are matched; fp32 ones are not."""
    centres = {("keras3-jax", "xla", "gemma-fit"): 50.0, ("native-torch", "none", "gemma-fit"): 80.0,
               ("keras3-jax", "xla", "sam-predict"): 40.0, ("native-torch", "none", "sam-predict"): 60.0}
    frame = _frame(tmp_path, centres)
    frame["dtype"] = np.where(frame["task"] == "gemma-fit", "bfloat16", "float32")  # an older row: no compute_dtype
    (row,) = precision.matched_rows(summarise(frame))
    assert row.task == "gemma-fit" and row.rows == "published setting (ran bf16)"


def test_ratio_interval_uses_the_two_level_bootstrap():
    rng = np.random.default_rng(3)
    a = [samples(rng, 20.0, 15) for _ in range(3)]
    b = [samples(rng, 10.0, 15) for _ in range(3)]
    ratio = stats.ratio_estimate(a, b)
    assert ratio.ratio == pytest.approx(stats.median(np.concatenate(a)) / stats.median(np.concatenate(b)))
    assert ratio.low < ratio.ratio < ratio.high and 1.8 < ratio.low and ratio.high < 2.2
    assert stats.ratio_estimate(a, b) == ratio  # seeded
    single = stats.ratio_estimate([np.array([4.0])], [np.array([2.0])])
    assert (single.ratio, single.low, single.high) == (2.0, 2.0, 2.0)


# --- stability and the diverged status ------------------------------------------------------------------------

def test_stability_section_lists_diverged_rows_and_fp16_loss_scaling(tmp_path):
    frame = _frame(tmp_path, {("native-torch", "none", "bert-fit"): 20.0, ("keras3-jax", "xla", "bert-fit"): 30.0,
                              ("native-torch", "none", "bert-predict"): 5.0},
                   precision="fp16", compute_dtype="float16", loss_scale=np.nan, loss_scale_skipped_steps=np.nan,
                   nonfinite_losses=np.nan)
    fit = (frame["stack"] == "native-torch") & (frame["task"] == "bert-fit")
    frame.loc[fit, ["loss_scale", "loss_scale_skipped_steps", "nonfinite_losses"]] = [32768.0, 2, 0]
    frame.loc[frame["task"] == "bert-predict", "loss_scale"] = 1.0  # not a fit row: not listed
    jax0 = (frame["stack"] == "keras3-jax") & (frame["repeat"] == 0)
    frame.loc[jax0, ["status", "error_message", "ms_per_step"]] = ["diverged", "loss became nan at step 7\nmore",
                                                                  None]
    blocks = stability.blocks(frame)
    doc = d.Document("t")
    doc.add(*blocks)
    md = d.to_markdown(doc, tmp_path)
    assert "## Numerical stability" in md
    assert "keras3-jax.bert-fit.tiny.compile-xla repeat 0: loss became nan at step 7" in md and "more" not in md
    table = [line for line in md.splitlines() if line.startswith("| native-torch.bert-fit")]
    assert len(table) == 3 and all(line.endswith("| float16 | 32768 | 2 | 0 |") for line in table)
    assert "bert-predict" not in md


def test_stability_section_without_v7_columns_is_a_placeholder(tmp_path):
    frame = _frame(tmp_path, {("native-torch", "none", "bert-fit"): 20.0})
    blocks = stability.blocks(frame)
    assert any("No row diverged" in getattr(b, "text", "") for b in blocks) and len(blocks) == 2


def test_the_status_table_counts_diverged(tmp_path, monkeypatch):
    """When the schema's STATUSES gains `diverged`, the statuses table and the cell words show it."""
    if "diverged" not in report.STATUSES:
        monkeypatch.setattr(report, "STATUSES", report.STATUSES + ("diverged",))
    frame = _frame(tmp_path, {("native-torch", "none", "bert-fit"): 20.0, ("keras3-jax", "xla", "bert-fit"): 30.0})
    frame.loc[frame["stack"] == "keras3-jax", ["status", "error_message", "ms_per_step"]] = [
        "diverged", "loss became nan", None]
    md, html, (summary,) = _document(frame, tmp_path)
    header = next(line for line in md.splitlines() if line.startswith("| task | variant | ok |"))
    assert "| diverged |" in header
    jax = next(line for line in md.splitlines() if line.startswith("| bert-fit | keras3-jax [xla] |"))
    cells = [c.strip() for c in jax.strip("|").split("|")]
    assert cells[2 + list(report.STATUSES).index("diverged")] == "3"
    bert = next(line for line in md.splitlines() if line.startswith("| bert-fit |"))
    assert "| diverged |" in bert  # the ms/step cell shows the status word
    assert "loss became nan" in md.split("## Numerical stability")[1]


def test_loading_admits_known_precisions_only(tmp_path):
    path = write(tmp_path, record("native-torch", "bert-fit", step_ms=[1.0, 2.0]))
    table = loading.read_result_file(path)
    column = table.schema.get_field_index("precision")

    def with_precision(values):
        return table.set_column(column, "precision", values)

    assert loading._identity_problem(with_precision(pa.array(["bf16"]))) is None
    assert loading._identity_problem(with_precision(pa.array([None], pa.string()))) is None
    problem = loading._identity_problem(with_precision(pa.array(["../x"])))
    assert problem == "unknown precision '../x'"
