"""Result rows: schema, atomic writes, and the documented schema staying in sync with the code."""

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fwbench.core import atomic, results
from fwbench.harness.cell import base_record
from fwbench.core.schema import COLUMN_NAMES, SCHEMA_VERSION
from fwbench.core.spec import CellSpec

SPEC = CellSpec(stack="native-torch", task="bert-fit", preset="tiny", compile_mode="none",
                data_dir="/nowhere", steps=3)


def test_failed_row_has_every_column(tmp_path):
    record = base_record(SPEC) | {"status": "error", "error_message": "boom", "surprise": 1}
    path = results.write_row(record, tmp_path / "x.parquet")
    table = pq.read_table(path)
    assert table.schema.names == list(COLUMN_NAMES)
    row = table.to_pylist()[0]
    assert row["status"] == "error" and row["schema_version"] == SCHEMA_VERSION
    assert row["ms_per_step"] is None
    assert '"surprise": 1' in row["extra"]  # unknown fields are kept, not dropped
    assert row["batch_size"] == 4


def test_write_is_atomic_and_leaves_no_temp_files(tmp_path):
    path = results.readable_path(SPEC, tmp_path / "deep")
    results.write_row(base_record(SPEC) | {"status": "ok", "ms_per_step": 1.0, "step_ms": [1.0]}, path)
    results.write_row(base_record(SPEC) | {"status": "ok", "ms_per_step": 2.0, "step_ms": [2.0]}, path)
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert results.read_row(path)["ms_per_step"] == 2.0
    assert results.matching_ok_row(SPEC, tmp_path / "deep") == (path, results.read_row(path))


def test_the_atomic_writer_gives_plain_permissions_and_cleans_up_after_a_failure(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: synced.append(fd))
    umask = os.umask(0o022)
    try:
        atomic.write_atomically(tmp_path / "a" / "plain.txt", "text")
        atomic.write_atomically_with(tmp_path / "synced.bin", lambda temp: temp.write_bytes(b"x"), fsync=True)
    finally:
        os.umask(umask)
    assert (tmp_path / "a" / "plain.txt").read_text() == "text" and len(synced) == 1
    assert (tmp_path / "synced.bin").stat().st_mode & 0o777 == 0o644  # not mkstemp's owner-only 0o600

    def half_written(temp):
        temp.write_bytes(b"half")
        raise OSError("disk full")
    with pytest.raises(OSError):
        atomic.write_atomically_with(tmp_path / "synced.bin", half_written)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "synced.bin"]
    assert (tmp_path / "synced.bin").read_bytes() == b"x"


def test_unreadable_file_is_not_an_ok_row(tmp_path):
    path = results.readable_path(SPEC, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"PAR1 not really")
    assert results.read_row(path) is None and results.matching_ok_row(SPEC, tmp_path) is None


def test_result_paths_are_deterministic_per_cell_and_repeat(tmp_path):
    defaults = replace(SPEC, steps=5, warmup=2, threads=os.cpu_count())  # the tiny preset's and this host's
    assert results.readable_path(defaults, tmp_path) == tmp_path / "tiny" / "native-torch" / "bert-fit.compile-none.r0.parquet"
    changed = replace(defaults, precision="tf32", threads=1, steps=100, warmup=0, per_step_sync=False, seed=3,
                      pin_set="paper-2024", repeat=2)
    assert results.readable_path(changed, tmp_path).name == \
        "bert-fit.compile-none.pins-paper-2024.prec-tf32.threads-1.warmup-0.steps-100.nosync.seed-3.r2.parquet"


def test_docs_list_every_column():
    doc = (Path(__file__).parents[1] / "docs" / "results-schema.md").read_text()
    columns_section = doc.split("## Columns", 1)[1]
    documented = re.findall(r"^\| `([a-z0-9_]+)` \|", columns_section, flags=re.M)
    assert documented == list(COLUMN_NAMES)
    assert f"schema_version` is {SCHEMA_VERSION}" in doc


def test_image_manifest_facts_are_read_without_the_freeze(tmp_path, monkeypatch):
    from fwbench.harness import envinfo

    path = tmp_path / "manifest.json"
    path.write_text('{"stack": "keras3-jax", "lock_sha256": "ab", "pip_freeze": ["x==1"]}\n')
    monkeypatch.setenv("FWBENCH_IMAGE_MANIFEST", str(path))
    assert envinfo.image_manifest() == {"stack": "keras3-jax", "lock_sha256": "ab"}
    monkeypatch.setenv("FWBENCH_IMAGE_MANIFEST", str(tmp_path / "absent.json"))
    assert envinfo.image_manifest() is None


def test_the_base_install_has_everything_the_cli_and_aggregator_import():
    """`fwbench aggregate` must not end in ModuleNotFoundError without an extra: every third-party module
    the runner's CLI side and the aggregator import is a base dependency."""
    import ast
    import sys
    import tomllib

    root = Path(__file__).parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    base = {re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0].lower() for dep in project["dependencies"]}
    # Modules only the cell processes or optional engines import (frameworks, docker SDK, NVML).
    cell_side = {"torch", "tensorflow", "jax", "keras", "keras_hub", "keras_nlp", "keras_cv", "transformers",
                 "diffusers", "peft", "segment_anything", "docker", "requests", "pynvml", "tf_keras",
                 "grain"}
    imported = set()
    for path in [*(root / "aggregator").rglob("*.py"), *(root / "runner" / "fwbench").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            imported.update(name.split(".")[0] for name in names)
    third_party = imported - set(sys.stdlib_module_names) - {"fwbench", "fwbench_aggregator"} - cell_side
    distribution = {"yaml": "pyyaml"}  # modules whose distribution has another name
    third_party = {distribution.get(name, name) for name in third_party}
    assert third_party <= base, f"imported but not in the base install: {sorted(third_party - base)}"


def test_project_docs_stand_alone():
    """Users only get the repository: no doc or docstring may send them to the team's shared folder."""
    root = Path(__file__).parents[1]
    files = [p for p in root.rglob("*") if p.suffix in (".md", ".py", ".yaml", ".toml", ".sh")
             and not any(part.startswith(".") for part in p.relative_to(root).parts)
             and p.name != "test_results.py"]
    offenders = [str(p.relative_to(root)) for p in files if re.search(r"\bshared/(design|reference|hooks)\b|\.\./shared",
                                                                        p.read_text(errors="replace"))]
    assert offenders == []


# --- no ok row is ever lost --------------------------------------------------------------------------------------

# Columns added after schema v7 (sweeps: v8; data-parallel scaling: v9; collectives' version, interconnect: v10).
NEWER_THAN_V7 = ("sweep_point", "sweep_installed", "devices", "global_batch_setting", "per_device_batch",
                 "global_batch", "comm_backend", "comm_backend_version", "interconnect")
PLACED = replace(SPEC, steps=5, pin_set="current", image_variant="cpu", device_model="Test CPU", engine="stand-in")


def write_v7_ok_row(spec: CellSpec, path: Path) -> bytes:
    """An ok row as fwbench wrote it at schema v7: without the later columns, schema_version 7."""
    import pyarrow as pa

    row = results.normalise(base_record(spec) | {"status": "ok", "ms_per_step": 1.5, "step_ms": [1.5]})
    row = {name: value for name, value in row.items() if name not in NEWER_THAN_V7} | {"schema_version": 7}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([row]), path)
    return path.read_bytes()


class FailingEngine:
    """The engine interface run_matrix uses; every cell it runs is a device_unavailable row (no process starts)."""

    name, pin_set, device = "stand-in", "current", "cpu"

    def __init__(self):
        self.ran = []

    def image_variant(self, stack):
        return "cpu"

    def device_model(self, gpu=None):
        return "Test CPU"

    def run_cell(self, spec, record_path, log_path):
        from fwbench.engines import CellOutcome

        self.ran.append(spec)
        record = base_record(spec) | {"status": "device_unavailable", "error_type": "DeviceUnavailable",
                                      "error_message": "the GPU is gone"}
        record_path.write_text(json.dumps(record))
        return CellOutcome(0, False, log_path, record_path)


def test_resume_keeps_an_ok_row_of_an_older_schema(tmp_path):
    """Its identity reads the missing settings as measured (no sweep, one device): the cell is not run again."""
    from fwbench.engines import matrix

    ok_path = results.readable_path(PLACED, tmp_path)
    before = write_v7_ok_row(PLACED, ok_path)
    engine = FailingEngine()
    [result] = matrix.run_matrix([PLACED], tmp_path, engine, resume=True)
    assert result.skipped and result.path == ok_path and not engine.ran
    assert ok_path.read_bytes() == before and [p.name for p in ok_path.parent.iterdir()] == [ok_path.name]


def test_a_failed_rerun_never_replaces_an_ok_row_of_an_older_schema(tmp_path):
    """Without --resume the cell runs again; its failure goes beside the ok row (the hashed name), never over it."""
    from fwbench.engines import matrix

    ok_path = results.readable_path(PLACED, tmp_path)
    before = write_v7_ok_row(PLACED, ok_path)
    [result] = matrix.run_matrix([PLACED], tmp_path, FailingEngine(), resume=False)
    assert ok_path.read_bytes() == before
    assert result.path == results.hashed_path(PLACED, tmp_path) and result.row["status"] == "device_unavailable"
    # A second failure replaces the first failure, not the ok row.
    matrix.run_matrix([PLACED], tmp_path, FailingEngine(), resume=False)
    assert ok_path.read_bytes() == before and len(list(ok_path.parent.iterdir())) == 2


def test_no_resume_lets_a_failed_rerun_replace_the_ok_row(tmp_path):
    from fwbench.engines import matrix

    ok_path = results.readable_path(PLACED, tmp_path)
    write_v7_ok_row(PLACED, ok_path)
    [result] = matrix.run_matrix([PLACED], tmp_path, FailingEngine(), resume=False, replace_ok=True)
    assert result.path == ok_path and results.read_row(ok_path)["status"] == "device_unavailable"


def test_no_rerun_replaces_an_ok_row_unless_asked(tmp_path):
    record = base_record(PLACED) | {"status": "ok", "ms_per_step": 1.5, "step_ms": [1.5]}
    first = results.write_new_row(PLACED, tmp_path, record)
    # An ok re-run goes beside the ok row (both measurements kept; the report shows the newest).
    second = results.write_new_row(PLACED, tmp_path, record | {"ms_per_step": 2.0, "step_ms": [2.0]})
    assert second == results.hashed_path(PLACED, tmp_path) and results.read_row(first)["ms_per_step"] == 1.5
    # Both names hold ok rows of this cell-repeat: a failure gets a name of its own.
    failed = base_record(PLACED) | {"status": "error", "error_message": "x"}
    third = results.write_new_row(PLACED, tmp_path, failed)
    assert third not in (first, results.hashed_path(PLACED, tmp_path)) and third.name.endswith(".r0.parquet")
    # --no-resume asked for the replacement.
    assert results.write_new_row(PLACED, tmp_path, record, replace_ok=True) == first
    assert [results.read_row(p)["status"] for p in (first, results.hashed_path(PLACED, tmp_path))] == ["ok", "ok"]
