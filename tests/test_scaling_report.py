"""The aggregator's data-parallel scaling table: speed-up and efficiency against the matching one-device cell
(weak scaling against the task's batch on one device, strong against --devices 1 --global-batch G)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fwbench.core import registry
from fwbench_aggregator import scaling
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
    return record(stack, "bert-fit", repeat=repeat, step_ms=[ms] * 5, **{**fields, **extra})


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
    assert weak.speedup == pytest.approx(2 * 10.0 / 13.0) and weak.efficiency == pytest.approx(10.0 / 13.0)
    strong = found[("keras3-jax", 2, 2 * BATCH)]
    assert strong.speedup == pytest.approx(20.0 / 16.0) and strong.efficiency == pytest.approx(20.0 / 16.0 / 2)
    assert found[("native-torch", 1, BATCH)].speedup == pytest.approx(1.0)
    assert found[("native-torch", 4, 4 * BATCH)].speedup is None  # no --devices 1 --global-batch 4b cell


def test_report_has_the_scaling_table(results, tmp_path):
    md = aggregate([results], tmp_path / "rep").report_md.read_text()
    section = md.split("Data-parallel scaling", 1)[1]
    assert "| bert-fit | native-torch | tiny | default | 2 | " in section and "77%" in section
    assert f"| bert-fit | keras3-jax | tiny | global_batch={2 * BATCH} | 2 | " in section  # strong scaling says so
    assert "no speed claim" in section  # CPU rows say what they are for
    assert "bert-predict" not in section.split("\n#", 1)[0]


def test_no_scaling_rows_no_section(tmp_path):
    write_named(tmp_path / "res", record("native-torch", "bert-fit", step_ms=[10.0] * 5), "one.parquet")
    assert "Data-parallel scaling" not in aggregate([tmp_path / "res"], tmp_path / "rep").report_md.read_text()
