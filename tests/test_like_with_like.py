"""Like with like (issue 36): the report's headline (main tables, Keras 3 best, speed-ups, rankings, plots, the published
comparison) holds one device, the task's batch and no sweep point; every comparison sets a cell only beside cells
equal in every other setting, and a missing like-for-like baseline is a "—" with the reason, never another cell."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fwbench.cli.commands import app
from fwbench.core import registry
from fwbench.core.results import write_row
from fwbench_aggregator import plots, precision, published
from fwbench_aggregator.aggregate import aggregate
from fwbench_aggregator.summary import summarise
from fwbench_aggregator.loading import load_results
from tests.aggregator_rows import record

SWEEP_POINT = "transformers==4.38.1"
OFF_HEADLINE = ("devices=", "global_batch=", "sweep_point=")


def write_named(out: Path, rec: dict, name: str) -> Path:
    """One file per row under its own name: rows of one cell key at several settings must not replace each other."""
    return write_row(rec, Path(out) / rec["preset"] / rec["stack"] / name)


def data_parallel(devices: int, global_batch: int | None, preset: str = "tiny", task: str = "bert-fit") -> dict:
    """The columns of a --devices N [--global-batch G] row."""
    batch = registry.workload(task, preset).batch_size
    total = global_batch or batch * devices
    return dict(devices=devices, global_batch_setting=global_batch, per_device_batch=total // devices,
                global_batch=total, batch_size=total)


def row(stack: str, ms: float, *, repeat: int = 0, **extra) -> dict:
    return record(stack, "bert-fit", repeat=repeat, step_ms=[ms, ms * 1.01, ms * 0.99, ms, ms * 1.02], **extra)


@pytest.fixture
def scaling_run(tmp_path) -> Path:
    """The issue's scaling run: keras3-jax bert-fit on 1 device (100 ms) and at --devices 2 --global-batch 8 (55 ms),
    native-torch on 1 device (80 ms); and a keras3-tensorflow sweep point (30 ms). One device, Keras 3 is 20% slower."""
    out = tmp_path / "res"
    for repeat in range(3):
        write_named(out, row("keras3-jax", 100.0, repeat=repeat), f"jax-1-r{repeat}.parquet")
        write_named(out, row("keras3-jax", 55.0, repeat=repeat, **data_parallel(2, 8)), f"jax-2-r{repeat}.parquet")
        write_named(out, row("native-torch", 80.0, repeat=repeat), f"torch-1-r{repeat}.parquet")
        write_named(out, row("keras3-tensorflow", 30.0, repeat=repeat, sweep_point=SWEEP_POINT,
                             sweep_installed=SWEEP_POINT), f"tf-sweep-r{repeat}.parquet")
    return out


def test_keras3_best_speedups_rankings_and_plots_name_only_one_device_unswept_cells(scaling_run, tmp_path):
    outcome = aggregate([scaling_run], tmp_path / "rep")
    (summary,) = outcome.summaries
    assert [v.label for v in summary.variants] == ["keras3-jax [xla]", "native-torch [none]"]
    best, estimate = summary.keras3_best("bert-fit")
    assert best.label == "keras3-jax [xla]" and estimate.median == pytest.approx(100.0)
    assert summary.speedup("bert-fit", ("native-torch", "none")) == pytest.approx(-20.0)
    _, series = plots.speedup_series(summary)
    assert series["PyTorch eager"] == [pytest.approx(-20.0)]
    (ranking,) = published.rankings(summary, published.load_published())
    assert [v.label for v in ranking.measured_order] == ["native-torch [none]", "keras3-jax [xla]"]
    md = outcome.report_md.read_text()
    main = md.split("### ms per step (tiny)", 1)[1].split("### Speed-up", 1)[0]
    assert not any(word in main for word in OFF_HEADLINE)
    assert "(jax)" in main.split("| bert-fit |", 1)[1].splitlines()[0]
    speedups = md.split("### Speed-up of Keras 3 best (tiny)", 1)[1].split("| bert-fit |", 1)[1].splitlines()[0]
    assert speedups.split(" | ")[0].strip() == "-20% (cannot rank)"  # the formula's figure, and the judge's word
    # The other values of each axis have their own section.
    scaling = md.split("## Data-parallel scaling", 1)[1].split("\n## ", 1)[0]
    assert "| bert-fit | keras3-jax | tiny | global_batch=8 | 2 |" in scaling
    assert "keras3-tensorflow [xla] bert-fit" in md.split("## Version sweeps", 1)[1]


def test_published_ratios_take_one_device_unswept_cells(tmp_path):
    out = tmp_path / "res"
    write_named(out, record("keras3-jax", "bert-fit", preset="paper", step_ms=[200.0] * 5), "one.parquet")
    write_named(out, record("keras3-jax", "bert-fit", preset="paper", step_ms=[110.0] * 5,
                            **data_parallel(2, None, "paper")), "two.parquet")
    write_named(out, record("keras3-jax", "bert-fit", preset="paper", step_ms=[150.0] * 5, sweep_point=SWEEP_POINT),
                "sweep.parquet")
    (summary,) = summarise(load_results([out]).frame())
    (ratio,) = published.ratios(summary, published.load_published())
    assert ratio.variant.label == "keras3-jax [xla]" and ratio.measured_ms == pytest.approx(200.0)


def test_a_baseline_only_off_the_headline_is_missing_with_the_reason(tmp_path):
    """native-torch ran only on 2 devices: Keras 3 best has no baseline, and the report says where it ran instead of
    borrowing the only native-torch cell there is."""
    out = tmp_path / "res"
    write_named(out, row("keras3-jax", 100.0), "jax.parquet")
    write_named(out, row("native-torch", 80.0, **data_parallel(2, None)), "torch-2.parquet")
    (summary,) = summarise(load_results([out]).frame())
    assert summary.speedup("bert-fit", ("native-torch", "none")) is None
    reason = "no like-for-like native-torch [none] cell; it ran as native-torch [none, devices=2]"
    assert summary.missing("bert-fit", (), "native-torch", "none") == reason
    md = aggregate([out], tmp_path / "rep").report_md.read_text()
    speedups = md.split("### Speed-up of Keras 3 best (tiny)", 1)[1].split("\n\n!", 1)[0]
    assert f"| bert-fit | — ({reason}) | — (no native-torch [reduce-overhead] cell) |" in speedups


def test_keras3_best_and_its_baselines_come_from_one_group_of_settings(tmp_path):
    """Settings other than the stack's split a task's variants into groups: Keras 3 best is found per group, and a
    group without a native-torch cell gets no speed-up, not one over another group's cell."""
    out = tmp_path / "res"
    write_named(out, row("keras3-jax", 100.0), "jax.parquet")
    write_named(out, row("keras3-tensorflow", 50.0, data_seed=3), "tf-seed-3.parquet")
    write_named(out, row("native-torch", 60.0, pin_set="paper-2024"), "torch-paper.parquet")
    md = aggregate([out], tmp_path / "rep").report_md.read_text()
    assert "| 100.0 (jax); 50 (tensorflow, seed=3) |" in md
    speedups = md.split("### Speed-up of Keras 3 best (tiny)", 1)[1].split("\n\n!", 1)[0]
    assert ("| bert-fit | — (no like-for-like native-torch [none] cell; it ran as native-torch [none, pins=paper-2024])"
            in speedups)
    assert "| bert-fit [seed=3] | — (no like-for-like native-torch [none, seed=3] cell;" in speedups
    (summary,) = summarise(load_results([out]).frame())
    assert list(summary.groups("bert-fit")) == [(), (("data_seed", 3),), (("pin_set", "paper-2024"),)]
    assert [summary.keras3_best("bert-fit", s)[0].label for s in summary.keras3_groups("bert-fit")] == [
        "keras3-jax [xla]", "keras3-tensorflow [xla, seed=3]"]
    assert all(summary.speedup("bert-fit", ("native-torch", "none"), s) is None for s in summary.groups("bert-fit"))


def test_the_matched_precision_table_takes_no_native_cell_of_other_settings(tmp_path):
    out = tmp_path / "res"
    bf16 = dict(precision="bf16", compute_dtype="bfloat16")
    write_named(out, row("keras3-jax", 40.0, jit_policy="off", **bf16), "jax.parquet")
    write_named(out, row("native-torch", 50.0, **bf16), "torch.parquet")
    (summary,) = summarise(load_results([out]).frame())
    (matched,) = precision.matched_rows([summary])
    assert matched.native is None and matched.ratio is None
    assert matched.missing == "no like-for-like native-torch cell at jit=off; it ran as native-torch [none]"


def test_aggregate_prints_a_main_table_of_headline_cells_and_sections_for_the_rest(tmp_path):
    """One stack's scaling, precision and sweep rows: the printed tables hold the one-device, unswept cells (one
    per precision); scaling and the sweep are sections of the report."""
    out = tmp_path / "res"
    for repeat in range(3):
        write_named(out, row("native-torch", 80.0, repeat=repeat), f"one-r{repeat}.parquet")
        write_named(out, row("native-torch", 45.0, repeat=repeat, precision="bf16", compute_dtype="bfloat16"),
                    f"bf16-r{repeat}.parquet")
        write_named(out, row("native-torch", 84.0, repeat=repeat, **data_parallel(2, None)), f"two-r{repeat}.parquet")
        write_named(out, row("native-torch", 90.0, repeat=repeat, sweep_point=SWEEP_POINT,
                             sweep_installed=SWEEP_POINT), f"sweep-r{repeat}.parquet")
    printed = CliRunner().invoke(app, ["aggregate", str(out), "-o", str(tmp_path / "rep")])
    assert printed.exit_code == 0, printed.output
    tables = " ".join(printed.output.split("note: ", 1)[0].split())
    assert "preset tiny: median" in tables and "preset tiny, bf16: median" in tables
    assert not any(word in tables for word in ("devices", "global_batch", "sweep_point"))
    assert "6 row(s) at other device counts, global batches or sweep points" in " ".join(printed.output.split())
    md = (tmp_path / "rep" / "report.md").read_text()
    assert md.count("## Preset tiny") == 1 and "### ms per step (tiny, bf16)" in md
    assert "| bert-fit | native-torch | tiny | default | 2 |" in md.split("## Data-parallel scaling", 1)[1]
    assert "native-torch [none] bert-fit (tiny)" in md.split("## Version sweeps", 1)[1]
    main = md.split("### ms per step (tiny)", 1)[1].split("\n\n###", 1)[0]
    assert not any(word in main for word in OFF_HEADLINE)
