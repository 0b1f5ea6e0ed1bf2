"""The report's "What ran" header is computed from the rows it shows (issue 49): every device with what it ran,
every precision as the identity reads it, ok repeats apart from failed ones, the source commit of each row and the
schema versions found."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fwbench.core.schema import ADDED_IN, SCHEMA_VERSION
from fwbench.core.spec import CellSpec
from fwbench.harness import envinfo
from fwbench.harness.cell import base_record
from fwbench_aggregator import document as d
from fwbench_aggregator import what_ran
from fwbench_aggregator.loading import load_results
from tests.aggregator_rows import record, write

H100 = "NVIDIA H100 80GB HBM3"
EPYC = "AMD EPYC (family 26, model 2)"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def gpu_row(task="bert-fit", repeat=0, **extra):
    return record("native-torch", task, preset="paper", repeat=repeat, step_ms=[5.0] * 5, device="cuda",
                  device_name=H100, device_model=H100, device_count=1, gpu_driver="580.159.04", cuda_driver="13.0",
                  **extra)


def cpu_row(task="bert-fit", repeat=0, **extra):
    extra = {"step_ms": [2.0] * 5, **extra}
    return record("keras3-jax", task, repeat=repeat, device="cpu", device_name=EPYC, device_model=EPYC,
                  cpu_model=EPYC, **extra)


def header(tmp_path: Path, *groups: list[dict], schema_version: int | None = None) -> list[str]:
    """The header's items, read from the rows as the report loads them. Each group goes to a folder of its own (rows
    of one cell and repeat at two settings would share a file name); schema_version: rewrite the files as that older
    version's, without the columns it did not have."""
    for number, rows in enumerate(groups):
        for row in rows:
            path = write(tmp_path / "res" / str(number), row)
            if schema_version is not None:
                _as_old_row(path, schema_version)
    blocks = what_ran.block(load_results([tmp_path / "res"]).frame())
    assert isinstance(blocks[0], d.Heading) and blocks[0].text == "What ran"
    return blocks[1].items


def item(items: list[str], label: str) -> str:
    """The item that starts with `label`, without it."""
    return next(i[len(label):].lstrip(": ") for i in items if i.startswith(label))


def _as_old_row(path: Path, schema_version: int) -> None:
    table = pq.read_table(path)
    newer = {column for version, columns in ADDED_IN.items() if version > schema_version for column in columns}
    table = table.drop_columns([c for c in table.column_names if c in newer])
    index = table.column_names.index("schema_version")
    table = table.set_column(index, pa.field("schema_version", pa.int64(), nullable=False),
                             pa.array([schema_version], pa.int64()))
    pq.write_table(table, path)


def test_every_device_is_named_with_the_presets_it_ran(tmp_path):
    items = header(tmp_path, [gpu_row()], [cpu_row(), cpu_row("sam-predict")])
    devices = item(items, "Devices")
    assert f"1x {H100} (driver 580.159.04, CUDA 13.0): paper" in devices
    assert f"CPU {EPYC}: tiny" in devices  # the CPU rows are named as CPU rows, with their preset
    assert devices.index(H100) < devices.index(EPYC)


def test_every_precision_is_listed_as_the_identity_reads_it(tmp_path):
    # A row without a precision (written before schema v7) is read by its TF32 setting: on is tf32.
    items = header(tmp_path, [cpu_row(precision="published")], [cpu_row(precision=None, tf32_setting="on")])
    assert item(items, "Pin sets").endswith("precisions: published, tf32")
    assert f"CPU {EPYC}: tiny (published, tf32)" in item(items, "Devices")  # each device says which it ran


def test_repeats_count_ok_ones_and_say_how_many_failed(tmp_path):
    rows = ([cpu_row(repeat=r) for r in range(3)]
            + [cpu_row(repeat=r, status="error", step_ms=None, timed_steps=5, error_message="boom") for r in (3, 4)])
    repeats = item(header(tmp_path, rows), "Repeats per cell")
    assert repeats.startswith("3 ok (2 failed repeats not counted: error 2)"), repeats


def test_the_source_commit_of_each_row_is_shown_short(tmp_path):
    items = header(tmp_path, [cpu_row(source_commit=COMMIT), cpu_row("sam-predict", source_commit=COMMIT)])
    assert item(items, "fwbench").startswith("0.1.0, source commit(s) 0123456789ab; schema v"), items
    assert not any(i.startswith("Command") for i in items)  # no column of that name: nothing to read it from


def test_an_old_row_without_the_column_has_an_unknown_commit_and_its_schema_is_named(tmp_path):
    old = item(header(tmp_path / "old", [cpu_row()], schema_version=6), "fwbench")
    assert old.startswith("0.1.0, source commit(s) unknown (1 row); schema v6 (read as v"), old
    mixed = tmp_path / "mixed"
    write(mixed / "res" / "new", cpu_row("sam-predict", source_commit=COMMIT))
    _as_old_row(write(mixed / "res" / "old", cpu_row()), 6)
    line = item(header(mixed), "fwbench")
    assert line.startswith(f"0.1.0, source commit(s) 0123456789ab (1 row unknown); "
                           f"schema v6, v{SCHEMA_VERSION} (read as v{SCHEMA_VERSION})"), line


def test_a_cells_base_record_carries_the_source_commit():
    spec = CellSpec(stack="native-torch", task="bert-fit", preset="tiny", compile_mode="none", data_dir="/nowhere",
                    steps=3)
    record_ = base_record(spec)
    assert record_["source_commit"] == envinfo.source_commit()
    checkout = Path(__file__).resolve().parents[1]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True)
    if head.returncode == 0 and not os.environ.get(envinfo.SOURCE_COMMIT_VARIABLE):
        # This checkout: the commit git itself names, read without running git.
        assert record_["source_commit"] == head.stdout.strip()


def test_the_source_commit_is_read_from_the_image_then_the_checkout(tmp_path):
    git = tmp_path / "checkout" / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "refs" / "heads" / "main").write_text(COMMIT + "\n")
    assert envinfo.read_source_commit(tmp_path / "checkout", {}) == COMMIT
    (git / "refs" / "heads" / "main").unlink()  # after `git gc` the branch lives in packed-refs
    (git / "packed-refs").write_text(f"# pack-refs with: peeled fully-peeled sorted\n{COMMIT} refs/heads/main\n")
    assert envinfo.read_source_commit(tmp_path / "checkout", {}) == COMMIT
    (git / "HEAD").write_text("fedcba9876543210fedcba9876543210fedcba98\n")  # detached
    assert envinfo.read_source_commit(tmp_path / "checkout", {}) == "fedcba9876543210fedcba9876543210fedcba98"
    # A worktree: .git is a file naming its folder, whose commondir holds the branches.
    (git / "refs" / "heads" / "main").write_text(COMMIT + "\n")
    worktree_git = git / "worktrees" / "other"
    worktree_git.mkdir(parents=True)
    (worktree_git / "HEAD").write_text("ref: refs/heads/main\n")
    (worktree_git / "commondir").write_text("../..\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / ".git").write_text(f"gitdir: {worktree_git}\n")
    assert envinfo.read_source_commit(tmp_path / "other", {}) == COMMIT
    # The image's build argument is declared: it wins over a (possibly stale) copied .git; unknown is no value.
    image = {envinfo.SOURCE_COMMIT_VARIABLE: "f" * 40}
    assert envinfo.read_source_commit(tmp_path / "checkout", image) == "f" * 40
    assert envinfo.read_source_commit(None, image) == "f" * 40
    assert envinfo.read_source_commit(tmp_path / "checkout", {envinfo.SOURCE_COMMIT_VARIABLE: "unknown"}) == \
        "fedcba9876543210fedcba9876543210fedcba98"
    assert envinfo.read_source_commit(None, {envinfo.SOURCE_COMMIT_VARIABLE: "unknown"}) == "unknown"
    assert envinfo.read_source_commit(tmp_path / "nowhere", {}) == "unknown"
