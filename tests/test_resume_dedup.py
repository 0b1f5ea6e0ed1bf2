"""Resume finds an ok row under any file name (an older file-name token too); of two ok rows of one cell-repeat the
report and --resume both take the quiet one, then the newest (fwbench.core.results.preferred_row_key)."""

import datetime as dt
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fwbench.core import results
from fwbench.core.schema import ADDED_IN
from fwbench.core.spec import CellSpec
from fwbench.harness.cell import base_record
from fwbench_aggregator import loading
from tests.aggregator_rows import record
from tests.conftest import run_fwbench

# A cell at default settings but --precision fp32 (before schema v7: --tf32 off), as a host's runner places it.
HOST = results.host_defaults("tiny", "bert-fit")
FP32 = CellSpec(stack="native-torch", task="bert-fit", preset="tiny", compile_mode="none", data_dir="/nowhere",
                steps=HOST["steps"], warmup=HOST["warmup"], threads=HOST["threads"], precision="fp32",
                image_variant="cpu", device_model="Test CPU", engine="stand-in")
# The name schema v6 gave that cell: its TF32 setting as the token (today's writer says prec-fp32).
V6_NAME = "bert-fit.compile-none.tf32-off.r0.parquet"
NEWER_THAN_V6 = tuple(column for version, columns in ADDED_IN.items() if version > 6 for column in columns)


def write_v6_ok_row(spec: CellSpec, path: Path) -> dict:
    """An ok row as schema v6 wrote it: no precision column (nor any later one), the TF32 setting `off`."""
    row = results.normalise(base_record(spec) | {"status": "ok", "ms_per_step": 1.5, "step_ms": [1.5]})
    row = {name: value for name, value in row.items() if name not in NEWER_THAN_V6}
    row |= {"schema_version": 6, "tf32_setting": "off", "settings_id": "v6settings"}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([row]), path)
    return results.read_row(path)


def test_resume_finds_an_ok_row_under_an_older_file_name(tmp_path):
    old_path = tmp_path / "tiny" / "native-torch" / V6_NAME
    row = write_v6_ok_row(FP32, old_path)
    assert "precision" not in row and old_path not in (results.readable_path(FP32, tmp_path),
                                                       results.hashed_path(FP32, tmp_path))
    assert results.matching_ok_row(FP32, tmp_path) == (old_path, row)
    # Only this identity and repeat: another repeat, or the published precision, has no ok row yet.
    assert results.matching_ok_row(replace(FP32, repeat=1), tmp_path) is None
    assert results.matching_ok_row(replace(FP32, precision="published"), tmp_path) is None


def ok_record(spec: CellSpec, ms: float, *, busy, minute: int) -> dict:
    return base_record(spec) | {"status": "ok", "ms_per_step": ms, "step_ms": [ms], "busy": busy,
                                "started_at": dt.datetime(2026, 1, 1, 12, minute, tzinfo=dt.timezone.utc)}


def test_resume_takes_the_row_the_report_keeps(tmp_path):
    """The readable name holds a newer busy row, the hashed name an older quiet one: both take the quiet one."""
    readable = results.write_row(ok_record(FP32, 9.0, busy=True, minute=5), results.readable_path(FP32, tmp_path))
    hashed = results.write_row(ok_record(FP32, 1.0, busy=False, minute=1), results.hashed_path(FP32, tmp_path))
    assert results.matching_ok_row(FP32, tmp_path)[0] == hashed
    loaded = loading.load_results([tmp_path])
    assert loaded.table.column(loading.SOURCE_COLUMN).to_pylist() == [str(hashed)] != [str(readable)]


def write_two(out: Path, first: dict, second: dict) -> None:
    """Two rows of one cell-repeat, under two names (as a re-run writes the second beside the first)."""
    folder = out / first["preset"] / first["stack"]
    results.write_row(first, folder / "bert-fit.compile-none.r0.parquet")
    results.write_row(second, folder / "bert-fit.compile-none.id-again.r0.parquet")


def at(minute: int) -> dt.datetime:
    return dt.datetime(2026, 1, 1, 12, minute, tzinfo=dt.timezone.utc)


def test_dedup_keeps_the_quiet_row_then_the_newest(tmp_path):
    # The newer row is busy, the older quiet: the quiet one stands, and the note says why.
    write_two(tmp_path / "busy", record("native-torch", "bert-fit", step_ms=[5.0], started_at=at(1), busy=False),
              record("native-torch", "bert-fit", step_ms=[9.0], started_at=at(2), busy=True))
    loaded = loading.load_results([tmp_path / "busy"])
    assert loaded.table.column("ms_per_step").to_pylist() == [5.0]
    assert any("appears more than once: kept the quiet row" in note for note in loaded.notes)
    # Two quiet rows (busy false, busy unknown): the newest.
    write_two(tmp_path / "quiet", record("native-torch", "bert-fit", step_ms=[5.0], started_at=at(1), busy=False),
              record("native-torch", "bert-fit", step_ms=[7.0], started_at=at(2), busy=None))
    loaded = loading.load_results([tmp_path / "quiet"])
    assert loaded.table.column("ms_per_step").to_pylist() == [7.0]
    assert any("appears more than once: kept the newest" in note for note in loaded.notes)
    # An ok row, busy and older, still beats a quiet newer failure.
    write_two(tmp_path / "failed", record("native-torch", "bert-fit", step_ms=[5.0], started_at=at(1), busy=True),
              record("native-torch", "bert-fit", status="error", error_message="x", started_at=at(2), busy=False,
                     timed_steps=1))  # the spec's steps, as the ok row's
    loaded = loading.load_results([tmp_path / "failed"])
    assert loaded.table.column("status").to_pylist() == ["ok"]
    assert any("appears more than once: kept the ok row" in note for note in loaded.notes)


def test_a_new_row_never_takes_the_name_of_an_ok_row(tmp_path):
    """Both direct names hold ok rows, and so does the name of the new row's own record id: it goes elsewhere."""
    results.write_row(ok_record(FP32, 1.0, busy=False, minute=1), results.readable_path(FP32, tmp_path))
    hashed = results.write_row(ok_record(FP32, 2.0, busy=False, minute=2), results.hashed_path(FP32, tmp_path))
    failed = base_record(FP32) | {"status": "error", "error_message": "x", "record_id": "samerecord00"}
    own = hashed.with_name(hashed.name.replace(".r0.parquet", ".samerecord00.r0.parquet"))
    results.write_row(ok_record(FP32, 3.0, busy=False, minute=3), own)
    path = results.write_new_row(FP32, tmp_path, failed)
    assert path.name.endswith(".r0.parquet") and results.read_row(path)["status"] == "error"
    assert results.read_row(own)["status"] == "ok"


@pytest.mark.integration
def test_resume_and_dedup_on_real_cells(tmp_path, shared_data):
    built = run_fwbench("env", "build", "native-torch")  # reused if already built
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    out = tmp_path / "results"
    cell = ["run", "--stack", "native-torch", "--task", "bert-predict", "--preset", "tiny", "--steps", "2",
            "--precision", "fp32", "--data", str(shared_data), "--out", str(out)]
    first = run_fwbench(*cell)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    [written] = list(out.rglob("*.parquet"))
    assert results.read_row(written)["status"] == "ok" and ".prec-fp32." in written.name
    # The name an older writer gave it (its TF32 setting as the token).
    older = written.with_name(written.name.replace(".prec-fp32.", ".tf32-off."))
    written.rename(older)
    again = run_fwbench(*cell, "--resume")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert list(out.rglob("*.parquet")) == [older]
    # A re-run without --resume writes a second ok row beside the first, never over it; the report keeps the one
    # the rule prefers (quiet, then newest), and a busy newer row gives way to a quiet older one.
    rerun = run_fwbench(*cell, "--no-resume")
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    files = sorted(out.rglob("*.parquet"))
    assert len(files) == 2 and older in files
    rows = [results.read_row(path) for path in files]
    assert all(row["status"] == "ok" for row in rows)
    [kept] = loading.load_results([out]).table.to_pylist()
    assert kept["record_id"] == max(rows, key=results.preferred_row_key)["record_id"]
    newer = max(files, key=lambda path: results.read_row(path)["started_at"])
    oldest = min(rows, key=lambda row: row["started_at"])
    for path in files:  # the newer row busy, the older quiet (CI's own rows are busy: set both)
        busy = path == newer
        table = pq.read_table(path)
        table = table.set_column(table.schema.get_field_index("busy"), "busy", pa.array([busy], pa.bool_()))
        pq.write_table(table, path)
    [kept] = loading.load_results([out]).table.to_pylist()
    assert kept["record_id"] == oldest["record_id"] and not kept["busy"]
