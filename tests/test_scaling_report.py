"""The aggregator's data-parallel scaling table: speed-up and efficiency against the matching one-device cell
(weak scaling against the task's batch on one device, strong against --devices 1 --global-batch G)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.figure
import numpy as np
import pytest

from fwbench.core import registry
from fwbench_aggregator import plots, scaling, stats
from fwbench_aggregator.aggregate import aggregate
from fwbench_aggregator.loading import load_results
from tests.aggregator_rows import record

BATCH = registry.workload("bert-fit", "tiny").batch_size


def write_named(out: Path, rec: dict, name: str) -> Path:
    from fwbench.core.results import write_row

    return write_row(rec, Path(out) / rec["preset"] / rec["stack"] / name)


def scaling_row(stack: str, devices: int, ms: float, *, global_batch: int | None = None, repeat: int = 0, **extra):
    per_device = BATCH if global_batch is None else global_batch // devices
    total = BATCH * devices if global_batch is None else global_batch
    fields = {} if devices == 1 and global_batch is None else dict(
        devices=devices, global_batch_setting=global_batch, per_device_batch=per_device, global_batch=total,
        batch_size=total, comm_backend="gloo" if devices > 1 else None)
    return record(stack, "bert-fit", repeat=repeat, **{"step_ms": [ms] * 5, **fields, **extra})


@pytest.fixture
def results(tmp_path):
    out = tmp_path / "res"
    # Weak scaling: 2 devices, each the task's batch, 12.5 ms a step against 10 on one device -> 1.6x, 80%.
    # The one-device row is an old one (no scaling columns: read as 1 device, weak scaling).
    old = record("native-torch", "bert-fit", step_ms=[10.0] * 5)
    write_named(out, old, "one.parquet")
    write_named(out, scaling_row("native-torch", 2, 12.5), "two.parquet")
    write_named(out, scaling_row("native-torch", 2, 13.5, repeat=1), "two-r1.parquet")  # median of 12.5, 13.5
    # Strong scaling: global batch 2b on 2 devices (b each) against 2b on one device.
    write_named(out, scaling_row("keras3-jax", 1, 20.0, global_batch=2 * BATCH), "j1.parquet")
    write_named(out, scaling_row("keras3-jax", 2, 16.0, global_batch=2 * BATCH), "j2.parquet")
    # A scaling cell without its one-device cell: shown, with no speed-up.
    write_named(out, scaling_row("native-torch", 4, 30.0, global_batch=4 * BATCH), "t4.parquet")
    # A one-device cell of no scaling group stays out of the table.
    write_named(out, record("native-torch", "bert-predict", step_ms=[3.0] * 5), "predict.parquet")
    return out


def test_speedup_and_efficiency_against_the_matching_one_device_cell(results):
    found = {(c.identity.stack, c.devices, c.global_batch): c for c in scaling.cells(load_results([results]).frame())}
    assert set(found) == {("native-torch", 1, BATCH), ("native-torch", 2, 2 * BATCH), ("keras3-jax", 1, 2 * BATCH),
                          ("keras3-jax", 2, 2 * BATCH), ("native-torch", 4, 4 * BATCH)}
    weak = found[("native-torch", 2, 2 * BATCH)]
    assert weak.ms_per_step == pytest.approx(13.0) and weak.per_device_batch == BATCH
    assert weak.speedup.value == pytest.approx(2 * 10.0 / 13.0) and weak.efficiency.value == pytest.approx(10.0 / 13.0)
    strong = found[("keras3-jax", 2, 2 * BATCH)]
    assert strong.speedup.value == pytest.approx(20.0 / 16.0)
    assert strong.efficiency.value == pytest.approx(20.0 / 16.0 / 2)
    assert found[("native-torch", 1, BATCH)].speedup.value == pytest.approx(1.0)
    assert found[("native-torch", 4, 4 * BATCH)].speedup is None  # no --devices 1 --global-batch 4b cell


def test_report_has_the_scaling_table(results, tmp_path):
    md = aggregate([results], tmp_path / "rep").report_md.read_text()
    section = md.split("Data-parallel scaling", 1)[1]
    assert "| bert-fit | native-torch | tiny | default | 2 | " in section and "77% [" in section
    assert f"| bert-fit | keras3-jax | tiny | global_batch={2 * BATCH} | 2 | " in section  # strong scaling says so
    assert "no speed claim" in section  # CPU rows say what they are for
    assert "bert-predict" not in section.split("\n#", 1)[0]


def test_scaling_cells_left_out_of_the_main_tables_have_their_place_here(tmp_path):
    """A --devices 1 --global-batch G cell without its N > 1 cell and a failed --devices 2 cell are off the headline:
    the main tables leave them out, so the scaling section shows them."""
    out = tmp_path / "res"
    write_named(out, record("native-torch", "bert-fit", step_ms=[10.0] * 5), "one.parquet")
    write_named(out, scaling_row("native-torch", 1, 18.0, global_batch=2 * BATCH), "strong-1.parquet")
    write_named(out, scaling_row("keras2-tensorflow", 2, 1.0, status="unsupported", step_ms=None,
                                 error_message="--devices 2: no data-parallel variant"), "k2.parquet")
    md = aggregate([out], tmp_path / "rep").report_md.read_text()
    main = md.split("### ms per step (tiny)", 1)[1].split("\n\n###", 1)[0]
    assert "global_batch" not in main and "keras2-tensorflow" not in main and "devices" not in main
    section = md.split("## Data-parallel scaling", 1)[1].split("\n## ", 1)[0]
    assert f"| bert-fit | native-torch | tiny | global_batch={2 * BATCH} | 1 |" in section
    assert ("bert-fit keras2-tensorflow [xla] (tiny), devices=2: unsupported: --devices 2: no data-parallel variant"
            in section)


def test_no_scaling_rows_no_section(tmp_path):
    write_named(tmp_path / "res", record("native-torch", "bert-fit", step_ms=[10.0] * 5), "one.parquet")
    assert "Data-parallel scaling" not in aggregate([tmp_path / "res"], tmp_path / "rep").report_md.read_text()


def _by_key(out: Path) -> dict:
    return {(c.identity.stack, c.devices): c for c in scaling.cells(load_results([out]).frame())}


@pytest.fixture
def known_repeats(tmp_path):
    """Weak scaling with step times whose bootstrap interval is known exactly: every step of a repeat takes the same
    time, so a resample's pooled median is the median of the repeats it drew. N=1: 10 ms in all three repeats; N=2:
    12, 13 and 14 ms (each median drawn with probability >= 7/27, so the 95% interval is [12, 14] ms)."""
    out = tmp_path / "res"
    for repeat in range(3):
        write_named(out, scaling_row("native-torch", 1, 10.0, repeat=repeat), f"one-r{repeat}.parquet")
        write_named(out, scaling_row("native-torch", 2, 12.0 + repeat, repeat=repeat), f"two-r{repeat}.parquet")
    return out


def test_intervals_of_ms_samples_speedup_and_efficiency(known_repeats):
    cell = _by_key(known_repeats)[("native-torch", 2)]
    assert (cell.ms.median, cell.ms.low, cell.ms.high) == pytest.approx((13.0, 12.0, 14.0))
    per_s = cell.samples_per_s  # 2 x batch per step; the slowest step is the fewest samples/s
    assert (per_s.value, per_s.low, per_s.high) == pytest.approx(
        (2 * BATCH * 1000 / 13, 2 * BATCH * 1000 / 14, 2 * BATCH * 1000 / 12))
    # speed-up = (2B / ms_2) / (B / 10) = 20 / ms_2, with the interval of the ms ratio scaled by the batches.
    assert (cell.speedup.value, cell.speedup.low, cell.speedup.high) == pytest.approx((20 / 13, 20 / 14, 20 / 12))
    assert (cell.efficiency.value, cell.efficiency.low, cell.efficiency.high) == pytest.approx((10 / 13, 10 / 14,
                                                                                                 10 / 12))
    row = dict(zip(scaling.HEADERS, scaling.table_rows([cell])[0]))
    assert row["ms/step [95% CI]"] == "13 [12–14]"
    assert row["speed-up [95% CI]"] == "1.54x [1.43–1.67]"
    assert row["efficiency [95% CI]"] == "77% [71–83%]"
    assert row["samples/s [95% CI]"] == (f"{2 * BATCH * 1000 / 13:.1f} [{2 * BATCH * 1000 / 14:.1f}–"
                                          f"{2 * BATCH * 1000 / 12:.1f}]")


def test_speedup_interval_is_the_bootstrap_ratio_of_the_two_cells_scaled_by_the_global_batches(tmp_path):
    rng = np.random.default_rng(7)
    out, one, two = tmp_path / "res", [], []
    for repeat in range(3):  # strong scaling: the same global batch on 1 and 4 devices
        one.append(20.0 * np.exp(rng.normal(0, 0.05, 5)))
        two.append(7.0 * np.exp(rng.normal(0, 0.08, 5)))
        write_named(out, record("keras3-jax", "bert-fit", repeat=repeat, step_ms=one[-1], devices=1,
                                global_batch_setting=4 * BATCH, per_device_batch=4 * BATCH, global_batch=4 * BATCH,
                                batch_size=4 * BATCH), f"one-r{repeat}.parquet")
        write_named(out, scaling_row("keras3-jax", 4, 0.0, global_batch=4 * BATCH, repeat=repeat, step_ms=two[-1]),
                    f"four-r{repeat}.parquet")
    expected = stats.ratio_estimate(one, two)  # ms_1 / ms_4, G_4 / G_1 = 1
    cell = _by_key(out)[("keras3-jax", 4)]
    assert (cell.speedup.value, cell.speedup.low, cell.speedup.high) == pytest.approx(
        (expected.ratio, expected.low, expected.high))
    assert cell.speedup.low < cell.speedup.value < cell.speedup.high
    assert cell.efficiency.low == pytest.approx(expected.low / 4)
    assert cell.ms == stats.estimate(two)  # the report's estimate of the cell's steps


def test_one_sample_shows_the_point_value_and_says_why_there_is_no_interval(tmp_path):
    out = tmp_path / "res"
    write_named(out, record("native-torch", "bert-fit", ms_per_step=10.0, timed_steps=5),  # no per-step times
                "one.parquet")
    write_named(out, scaling_row("native-torch", 2, 12.5), "two.parquet")
    cell = _by_key(out)[("native-torch", 2)]
    row = dict(zip(scaling.HEADERS, scaling.table_rows([cell])[0]))
    assert row["ms/step [95% CI]"].startswith("12.5 [")  # its own steps still have an interval
    assert row["speed-up [95% CI]"] == "1.60x (1 sample at N=1)"
    assert row["efficiency [95% CI]"] == "80% (1 sample at N=1)"
    md = aggregate([out], tmp_path / "rep").report_md.read_text().split("Data-parallel scaling", 1)[1]
    assert "10 (1 sample)" in md and "nothing to resample" in md
    assert "single repeat" in md  # and the intervals of one repeat cover step noise only, as the main table says


def test_chart_has_one_series_per_stack_in_report_order_and_the_ideal_line(results, tmp_path, monkeypatch):
    saved = []
    original = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda fig, path, **kw: (saved.append((Path(path).name, fig)), original(fig, path, **kw))[1])
    report = aggregate([results], tmp_path / "rep")
    chart = report.report_md.parent / scaling.CHART
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = dict(saved)[scaling.CHART]
    panels = [ax for ax in fig.axes if ax.get_visible()]
    titles = [ax.get_title() for ax in panels]
    # Weak scaling and strong scaling at 2B are two groups; 4 devices at 4B has no one-device cell, so no panel.
    assert len(panels) == 2 and all("no speed claim" in t for t in titles)
    weak = panels[titles.index(next(t for t in titles if ", default)" in t))]
    labels = weak.get_legend_handles_labels()[1]
    assert labels == ["ideal (speed-up = N)", "native-torch [none]"]
    strong = next(ax for ax in panels if ax is not weak)
    assert strong.get_legend_handles_labels()[1] == ["ideal (speed-up = N)", "keras3-jax [xla]"]
    html = report.report_md.with_name("report.html").read_text().split("Data-parallel scaling", 1)[1]
    assert 'alt="speed-up against devices N' in html and "data:image/png;base64," in html
    assert f"]({scaling.CHART})" in report.report_md.read_text()


def test_stacks_side_by_side_in_one_panel_in_report_order(known_repeats):
    for repeat in range(3):
        write_named(known_repeats, scaling_row("keras3-jax", 1, 8.0, repeat=repeat), f"j1-r{repeat}.parquet")
        write_named(known_repeats, scaling_row("keras3-jax", 2, 9.0, repeat=repeat), f"j2-r{repeat}.parquet")
        write_named(known_repeats, scaling_row("keras3-tensorflow", 1, 9.0, repeat=repeat), f"t1-r{repeat}.parquet")
        write_named(known_repeats, scaling_row("keras3-tensorflow", 2, 11.0, repeat=repeat), f"t2-r{repeat}.parquet")
    found = scaling.cells(load_results([known_repeats]).frame())
    assert [(c.identity.stack, c.devices) for c in found] == [
        ("keras3-tensorflow", 1), ("keras3-tensorflow", 2), ("keras3-jax", 1), ("keras3-jax", 2),
        ("native-torch", 1), ("native-torch", 2)]
    (panel,) = scaling.chart_panels(found)
    assert list(panel.series) == ["keras3-tensorflow [xla]", "keras3-jax [xla]", "native-torch [none]"]
    assert panel.no_speed_claim and "bert-fit (tiny, default)" in panel.title
    reference, scaled = panel.series["keras3-jax [xla]"]
    assert reference == (1, 1.0, None)  # the N=1 reference has no interval
    assert scaled[0] == 2 and scaled[1] == pytest.approx(2 * 8 / 9) and scaled[2] == pytest.approx((16 / 9,) * 2)


def test_chart_title_from_row_text_is_not_read_as_mathtext(tmp_path):
    panel = plots.ScalingPanel("bert-fit (tiny, default) on GPU $x^$ model", no_speed_claim=False,
                               series={"native-torch [none]": [(1, 1.0, None), (2, 1.8, (1.7, 1.9))]})
    assert plots.scaling_chart([panel], tmp_path / "s.png").stat().st_size > 0
