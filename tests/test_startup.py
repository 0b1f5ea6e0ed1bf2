"""Cell start-up: where a cell process's time goes besides the measurement (phases on the row), the teardown it
skips once its record is written, and the persistent compilation cache, labelled on rows (compile_cache_warm)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fwbench.core import results
from fwbench.core.spec import CellSpec
from fwbench.harness import cell
from tests.conftest import run_fwbench

RUNNER = Path(__file__).resolve().parents[1] / "runner"
PHASES = {"interpreter_start", "data_load", "framework_import", "workload_import", "build_and_steps", "describe",
          "ceiling"}


def test_the_phase_timer_splits_time_into_consecutive_phases():
    phases = cell.PhaseTimer()
    time.sleep(0.05)
    phases.done("first")
    phases.done("second")
    assert list(phases.seconds) == ["first", "second"]
    assert 0.04 <= phases.seconds["first"] < 1.0 and 0 <= phases.seconds["second"] < 0.04


def test_the_process_age_is_read_from_the_kernel():
    """This test process started before the test did, and not before the machine."""
    age = cell._process_age_now()
    assert age is not None and age > 0
    with open("/proc/uptime") as f:
        assert age <= float(f.read().split()[0])


def test_the_compile_cache_is_asked_for_and_per_stack_pin_set_mode_and_cpu_count(monkeypatch, tmp_path):
    monkeypatch.setenv("FWBENCH_COMPILE_CACHE", str(tmp_path / "cc"))
    assert cell.compile_cache_dir("keras3-jax", "paper-2024", "xla", cpus=2) == (
        tmp_path / "cc" / "keras3-jax-paper-2024-xla-2cpu")
    assert cell.compile_cache_dir("keras3-jax", "current", "xla", cpus=16) == (
        tmp_path / "cc" / "keras3-jax-current-xla-16cpu")
    # Not asked for: none, wherever fwbench keeps its other files.
    monkeypatch.delenv("FWBENCH_COMPILE_CACHE")
    monkeypatch.setenv("FWBENCH_HOME", str(tmp_path / "home"))
    assert cell.compile_cache_dir("keras3-jax", "current", "xla", cpus=2) is None


def test_the_cpu_count_of_the_compile_cache_is_the_processs_own(monkeypatch):
    """What XLA's CPU client sizes its threads from: the CPUs the process may run on, not the machine's."""
    from fwbench.core import cpusets

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 5}, raising=False)
    assert cpusets.own_cpu_count() == 2


def test_the_cell_process_writes_its_record_then_skips_the_interpreter_teardown(tmp_path, shared_data):
    """An atexit handler (as frameworks register) never runs: the process ends right after the record is written,
    with the record's exit code."""
    hook = tmp_path / "hook"
    hook.mkdir()
    marker = tmp_path / "teardown-ran"
    (hook / "sitecustomize.py").write_text(
        f"import atexit\natexit.register(lambda: open({str(marker)!r}, 'w').close())\n")
    spec = CellSpec(stack="native-torch", task="bert-predict", preset="tiny", compile_mode="none",
                    data_dir=str(shared_data), steps=1, fault="raise")
    spec_path, record_path = tmp_path / "spec.json", tmp_path / "record.json"
    spec_path.write_text(spec.to_json())
    done = subprocess.run([sys.executable, "-m", "fwbench.harness.cell", str(spec_path), str(record_path)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), str(RUNNER)])})
    record = json.loads(record_path.read_text())
    assert record["status"] == "error" and "injected fault" in record["error_message"]
    assert done.returncode == 1
    assert not marker.exists()
    # The handler is real: the same interpreter without the harness runs it.
    subprocess.run([sys.executable, "-c", "pass"], env={**os.environ, "PYTHONPATH": str(hook)}, check=True)
    assert marker.exists()


def rows_of(out: Path) -> list[dict]:
    return sorted((results.read_row(p) for p in out.rglob("*.parquet")), key=lambda row: row["repeat"])


@pytest.mark.integration
def test_a_jax_repeat_compiles_its_programs_unless_a_cache_is_asked_for(tmp_path, shared_data):
    """keras3-jax: by default a cell compiles its programs (no persistent cache: null; every repeat is a process of
    its own in the same environment, so one shows it). With FWBENCH_COMPILE_CACHE the first cell finds the cache
    empty (cold), the repeat finds the programs the first one compiled (warm); both rows say which. Every row
    carries its start-up phases and the runner's process time."""
    done = run_fwbench("run", "--stack", "keras3-jax", "--task", "bert-predict", "--preset", "tiny", "--steps", "2",
                       "--data", str(shared_data), "--out", str(tmp_path / "default"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [row] = rows_of(tmp_path / "default")
    assert (row["status"], row["compile_cache_warm"]) == ("ok", None)
    assert "compile_cache" not in json.loads(row["extra"])

    cache = tmp_path / "compile-cache"
    done = run_fwbench("run", "--stack", "keras3-jax", "--task", "bert-predict", "--preset", "tiny", "--repeats", "2",
                       "--steps", "2", "--data", str(shared_data), "--out", str(tmp_path / "out"),
                       env={"FWBENCH_COMPILE_CACHE": str(cache)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = rows_of(tmp_path / "out")
    assert [row["status"] for row in rows] == ["ok", "ok"]
    assert [row["compile_cache_warm"] for row in rows] == [False, True]
    cpus = len(os.sched_getaffinity(0))
    assert any((cache / f"keras3-jax-current-xla-{cpus}cpu").iterdir())
    for row in rows:
        extra = json.loads(row["extra"])
        assert extra["compile_cache"] == f"keras3-jax-current-xla-{cpus}cpu"
        assert set(extra["phases_s"]) == PHASES and all(v is None or v >= 0 for v in extra["phases_s"].values())
        assert extra["phases_s"]["interpreter_start"] > 0
        # The phases add up to the cell's own wall time; the runner saw the process for at least as long.
        assert sum(v for k, v in extra["phases_s"].items() if k != "interpreter_start") <= row["wall_s"] + 0.01
        assert extra["process_s"] >= row["wall_s"]
    if cpus < 2:
        return
    # A cell on fewer CPUs finds none of those programs: XLA compiled them for the other cell's thread count.
    done = run_fwbench("run", "--stack", "keras3-jax", "--task", "bert-predict", "--preset", "tiny", "--threads", "1",
                       "--steps", "2", "--data", str(shared_data), "--out", str(tmp_path / "one-cpu"),
                       env={"FWBENCH_COMPILE_CACHE": str(cache)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [row] = rows_of(tmp_path / "one-cpu")
    assert row["status"] == "ok" and row["threads"] == 1
    assert row["compile_cache_warm"] is False and json.loads(row["extra"])["compile_cache"] == "keras3-jax-current-xla-1cpu"


@pytest.mark.integration
def test_an_eager_torch_row_has_no_compile_cache_to_speak_of(tmp_path, shared_data):
    done = run_fwbench("run", "--stack", "native-torch", "--task", "bert-predict", "--preset", "tiny", "--steps", "2",
                       "--data", str(shared_data), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [row] = rows_of(tmp_path / "out")
    assert row["status"] == "ok" and row["compile_cache_warm"] is None
    assert set(json.loads(row["extra"])["phases_s"]) == PHASES
