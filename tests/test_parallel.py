"""`fwbench run --parallel`: cells really overlap, each pinned to cores of its own, rows say so, the
report marks them, resume still works.

Cells run with the `current` engine and the hidden fault options (`sleep:S` acts before any framework is
imported), so these are real cell processes without a stack environment.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from fwbench.engines import matrix
from fwbench.core import results
from fwbench.engines.local import current_engine
from fwbench.harness.cell import base_record
from fwbench.harness.envinfo import cpu_model
from fwbench.engines.slots import parse_cpu_set, plan_slots, usable_cpus
from fwbench.core.spec import CellSpec
from fwbench_aggregator.aggregate import aggregate
from tests.aggregator_rows import record, write
from tests.test_cli import FWBENCH, _cell_pids, _gone, fwbench

CORES = usable_cpus()
needs_two_cores = pytest.mark.skipif(len(CORES) < 2, reason="two cells on cores of their own need two cores")


def rows_of(out) -> list[dict]:
    return [results.read_row(path) for path in sorted(out.rglob("*.parquet"))]


def span(row: dict) -> tuple[dt.datetime, dt.datetime]:
    return row["started_at"], row["started_at"] + dt.timedelta(seconds=row["wall_s"])


@pytest.mark.parametrize("args, message", [
    (["--parallel", "0"], "--parallel must be at least 1"),
    (["--parallel", "many"], "--parallel must be a positive number or auto, not 'many'"),
    (["--parallel", str(len(CORES) + 1)], "needs a CPU core per cell"),
    (["--parallel", "2", "--threads", str(len(CORES) // 2 + 1)], "each of the 2 parallel cells gets"),
])
def test_bad_parallel_requests_are_one_line_and_exit_2(tmp_path, args, message):
    done = fwbench("run", "--stack", "native-torch", "--task", "bert-predict", "--engine", "current",
                   "--out", str(tmp_path / "r"), "--data", str(tmp_path / "data"), "--inject-fault", "raise", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and message in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not list(tmp_path.rglob("*.parquet"))


@needs_two_cores
def test_two_cells_overlap_in_time_each_pinned_to_its_own_core(tmp_path):
    out = tmp_path / "results"
    done = fwbench("run", "--stack", "native-torch", "--task", "bert-predict", "--task", "bert-fit",
                   "--engine", "current", "--parallel", "2", "--out", str(out), "--data", str(tmp_path / "data"),
                   "--inject-fault", "sleep:3")
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    first, second = rows_of(out)
    (start_a, end_a), (start_b, end_b) = span(first), span(second)
    assert max(start_a, start_b) < min(end_a, end_b), "the two cells did not run at the same time"
    # Read back by each cell process from its own affinity: one core each, not the same one.
    halves = [set(CORES[:len(CORES) // 2]), set(CORES[len(CORES) // 2:2 * (len(CORES) // 2)])]
    assert sorted([parse_cpu_set(first["cpu_set"]), parse_cpu_set(second["cpu_set"])], key=min) == halves
    assert first["parallel_cells"] == second["parallel_cells"] == 2
    assert first["threads"] == second["threads"] == len(CORES) // 2  # a slot's cores, not the host's
    assert first["gpu_index"] is None and second["gpu_index"] is None  # a CPU-only host


@needs_two_cores
def test_results_come_back_in_plan_order_whatever_finishes_first(tmp_path):
    """Three cells on two slots: the first sleeps longest, so the other two finish before it."""
    base = CellSpec(stack="native-torch", task="", preset="tiny", compile_mode="none", data_dir=str(tmp_path / "d"),
                    steps=5, threads=1, timeout_s=60)
    specs = [replace(base, task=task, fault=fault) for task, fault in
             (("bert-fit", "sleep:4"), ("bert-predict", "sleep:0.5"), ("sam-fit", "sleep:0.5"))]
    matrix.ensure_data(specs)
    started, finished = [], []
    outcomes = matrix.run_matrix(specs, tmp_path / "out", current_engine(), False,
                                 lambda spec: started.append(spec.task), on_done=lambda result: finished.append(result.spec.task),
                                 slots=plan_slots(2, 1, CORES, []))
    assert [result.spec.task for result in outcomes] == ["bert-fit", "bert-predict", "sam-fit"]
    assert finished[-1] == "bert-fit" and sorted(started) == sorted(finished) == sorted(s.task for s in specs)
    long, short_a, short_b = (result.row for result in outcomes)
    assert long["parallel_cells"] == 2  # the two short cells ran one after the other beside it
    assert short_a["cpu_set"] == short_b["cpu_set"] != long["cpu_set"]  # the free slot took the next cell
    assert not (tmp_path / "out" / ".work").exists()


@needs_two_cores
def test_resume_with_parallel_skips_ok_rows_and_runs_the_rest(tmp_path):
    out = tmp_path / "results"
    threads = len(CORES) // 2  # what --parallel 2 gives each cell
    spec = CellSpec(stack="native-torch", task="bert-predict", preset="tiny", compile_mode="none",
                    data_dir=str(tmp_path / "data"), steps=5, warmup=2, threads=threads, image_variant="host",
                    device_model=cpu_model())
    kept = {}
    for task in ("bert-predict", "sam-fit"):
        done_spec = replace(spec, task=task)
        path = results.readable_path(done_spec, out)
        results.write_row(base_record(done_spec) | {"status": "ok", "ms_per_step": 1.5, "step_ms": [1.5]}, path)
        kept[path] = path.read_bytes()
    done = fwbench("run", "--stack", "native-torch", "--task", "bert-predict", "--task", "bert-fit",
                   "--task", "sam-fit", "--task", "sam-predict", "--engine", "current", "--parallel", "2",
                   "--out", str(out), "--data", str(tmp_path / "data"), "--inject-fault", "raise", "--resume")
    assert done.stdout.count("skip native-torch") == 2, done.stdout
    assert all(path.read_bytes() == before for path, before in kept.items())
    rows = {row["task"]: row for row in rows_of(out)}
    assert sorted(rows) == ["bert-fit", "bert-predict", "sam-fit", "sam-predict"]
    assert rows["bert-fit"]["status"] == rows["sam-predict"]["status"] == "error"


def test_the_report_keeps_concurrent_rows_in_the_tables_and_marks_them(tmp_path):
    steps = [5.0, 5.2, 4.9, 5.1, 5.0]
    write(tmp_path / "res", record("native-torch", "bert-fit", step_ms=steps, parallel_cells=2, cpu_set="0"))
    write(tmp_path / "res", record("native-torch", "sam-fit", step_ms=steps, parallel_cells=2, cpu_set="1"))
    write(tmp_path / "res", record("native-torch", "bert-predict", step_ms=steps, parallel_cells=1, cpu_set="0-1"))
    outcome = aggregate([tmp_path / "res"], tmp_path / "rep")
    md = outcome.report_md.read_text()
    assert "2 of 3 ok row(s) ran concurrently, up to 2 cells at once" in md
    line = {task: next(row for row in md.splitlines() if row.startswith(f"| {task} |"))
            for task in ("bert-fit", "sam-fit", "bert-predict")}
    assert "‡" in line["bert-fit"] and "‡" in line["sam-fit"] and "‡" not in line["bert-predict"]
    assert "[" in line["bert-fit"]  # a number with its interval, not left out
    assert "‡ includes repeats that ran at the same time as other cells" in md
    assert "| CPUs | GPU | cells at once |" in md and "| 0 | — | 2 |" in md
    assert "## Busy rows" not in md
    (summary,) = outcome.summaries
    assert {task: status.concurrent for (task, _), status in summary.statuses.items()} == {
        "bert-fit": 1, "sam-fit": 1, "bert-predict": 0}


def test_rows_written_before_the_placement_columns_read_as_unknown(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = write(tmp_path / "v2", record("native-torch", "bert-fit", step_ms=[5.0, 5.1]))
    table = pq.read_table(path).drop_columns(["cpu_set", "gpu_index", "parallel_cells", "pin_deviations"])
    pq.write_table(table.set_column(0, table.schema.field("schema_version"), pa.array([2])), path)
    md = aggregate([tmp_path / "v2"], tmp_path / "rep").report_md.read_text()
    assert "‡" not in md and "ran concurrently" not in md and "| — | — | — |" in md


def _as_from_a_terminal() -> None:
    """The runner's SIGINT as a shell started from a terminal gives it: Python turns SIGINT into KeyboardInterrupt
    only where its parent left SIGINT at its default, and a blocked signal stays blocked across exec. Under the
    whole suite the runner once did not react to SIGINT at all (nothing on stderr in 180 s, 2026-11-27), as if the
    pytest worker had SIGINT ignored or blocked by then; this test is about the runner, not about its parent."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _signal_state(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as exc:
        return f"unreadable ({exc})"
    return ", ".join(line.replace("\t", " ") for line in status if line.startswith(("SigPnd", "ShdPnd", "SigBlk",
                                                                                    "SigIgn", "SigCgt", "State")))


@needs_two_cores
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL])
def test_no_cell_outlives_a_parallel_runner(tmp_path, stop):
    """Ctrl-C or SIGKILL while two cells run on worker threads: both cell processes end with the runner."""
    out = tmp_path / "results"
    runner = subprocess.Popen([*FWBENCH, "run", "--stack", "native-torch", "--task", "bert-predict", "--task",
                               "bert-fit", "--engine", "current", "--parallel", "2", "--out", str(out), "--data",
                               str(tmp_path / "data"), "--inject-fault", "sleep:600"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              preexec_fn=_as_from_a_terminal)
    try:
        deadline = time.monotonic() + 60
        while len(_cell_pids(str(out))) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        cells = _cell_pids(str(out))
        assert len(cells) == 2, "the two cells never ran at the same time"
        runner.send_signal(stop)
        # 180 s: under the whole suite with the Docker tests beside it on 2 busy cores (2026-11-26) the runner took
        # over 90 s to exit after SIGINT; alone or beside one torch test file about a second in 13 of 13 runs. The
        # cells sleep 600 s, so a runner that waited for them still fails here.
        try:
            _, stderr = runner.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the runner did not exit in 180 s after {stop.name}; its signal state: "
                        f"{_signal_state(runner.pid)}")
        deadline = time.monotonic() + 10
        while not all(_gone(pid) for pid in cells) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(_gone(pid) for pid in cells), f"cells {cells} outlived their runner"
        if stop == signal.SIGINT:
            assert runner.returncode == 130 and "Traceback" not in stderr  # Typer turns Ctrl-C into exit 130
    finally:
        runner.kill()
        for pid in _cell_pids(str(out)):
            os.kill(pid, signal.SIGKILL)


def test_an_unplaced_spec_reads_as_before_and_a_placed_one_round_trips(tmp_path):
    """Without --parallel the spec a cell reads has no placement keys, so an image whose fwbench predates
    them still runs it (docker engine); a placed spec keeps its cores and GPU."""
    spec = CellSpec(stack="native-torch", task="bert-fit", preset="tiny", compile_mode="none", data_dir="/data", steps=5)
    assert "cpu_set" not in spec.to_json() and "gpu_index" not in spec.to_json()
    placed = replace(spec, cpu_set="2-3", gpu_index=1)
    assert CellSpec.from_json(placed.to_json()) == placed and CellSpec.from_json(spec.to_json()) == spec
