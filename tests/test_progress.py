"""Progress of `fwbench run` and `fwbench sweep` (fwbench.cli.progress): each cell's estimate (the history store's
median wall time of its identity, else the registry's), what is left after some cells, resume-skipped cells, the plain
line, a display that fails, and `fwbench run` / `fwbench sweep` printing `[N/M]` lines when not on a terminal."""

from __future__ import annotations

import datetime as dt
import io
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from tests.aggregator_rows import record
from fwbench.cli import progress
from fwbench.core.identity import CellIdentity
from fwbench.core.results import target_path, write_row
from fwbench.core.spec import CellSpec

FWBENCH = [sys.executable, "-m", "fwbench.cli"]
LINE = re.compile(r"^\[(\d+)/(\d+)\] \d+:\d\d:\d\d elapsed, ")


def spec_of(task: str = "bert-predict", repeat: int = 0, **changes) -> CellSpec:
    """A spec of the identity tests.aggregator_rows.record gives its rows."""
    fields = dict(steps=20, warmup=2, repeat=repeat, threads=2, device_model="Test CPU", image_variant="venv",
                  pin_set="current", device="cpu")
    fields.update(changes)
    return CellSpec("native-torch", task, "tiny", "none", "/d", **fields)


def stored_rows(tmp_path: Path, walls: dict[str, list[float]], status: str = "ok") -> Path:
    """A history store holding, per task, one row per wall time (extra.process_s), each its own measurement."""
    from fwbench_aggregator import history

    out = tmp_path / "results"
    second = 0
    for task, times in walls.items():
        for repeat, wall in enumerate(times):
            second += 1
            row = record("native-torch", task, repeat=repeat, step_ms=[10.0] * 20 if status == "ok" else None,
                         status=status, started_at=dt.datetime(2026, 1, 1, 12, 0, second, tzinfo=dt.timezone.utc),
                         wall_s=wall - 1.0, extra={"process_s": wall})
            write_row(row, target_path(spec_of(task, repeat), out / f"run{second}", row))
    history.add(tmp_path / "store", [out])
    return tmp_path / "store"


def test_the_rows_of_a_spec_have_its_identity():
    row = record("native-torch", "bert-predict")
    assert CellIdentity.of_row(row) == CellIdentity.of_spec(spec_of())


def test_a_cell_in_the_store_is_estimated_by_the_median_of_its_rows(tmp_path):
    store = stored_rows(tmp_path, {"bert-predict": [10.0, 30.0, 14.0], "bert-fit": [40.0, 50.0]})
    estimates = progress.estimate_seconds([spec_of("bert-predict"), spec_of("bert-fit", 1)], store)
    assert estimates == [(14.0, "history"), (45.0, "history")]


def test_a_row_without_the_runners_timing_counts_its_own_wall_time():
    row = {"status": "ok", "wall_s": 12.5, "extra": "{}"}
    assert progress.row_wall_s(row) == 12.5
    assert progress.row_wall_s({**row, "extra": '{"process_s": 14.0}'}) == 14.0
    assert progress.row_wall_s({"wall_s": None, "extra": None}) is None


def test_ok_rows_alone_estimate_a_cell_that_has_them():
    ok = {**record("native-torch", "bert-predict"), "extra": {"process_s": 20.0}}
    failed = {**record("native-torch", "bert-predict", status="error"), "extra": {"process_s": 2.0}}
    walls = progress.walls_of_rows([ok, failed, failed])
    assert walls[CellIdentity.of_spec(spec_of())] == [20.0]
    assert progress.walls_of_rows([failed])[CellIdentity.of_spec(spec_of())] == [2.0]


def test_a_cell_without_history_gets_the_registry_estimate(tmp_path):
    from fwbench.kit.estimates import estimate_s
    from fwbench.kit.unit import Unit

    store = stored_rows(tmp_path, {"bert-predict": [10.0]})
    other = spec_of("bert-fit")
    expected = estimate_s(Unit(other))
    assert progress.estimate_seconds([other], store) == [(expected, "registry")]
    assert progress.estimate_seconds([other], None) == [(expected, "registry")]
    # another setting is another cell: its history is not this one's
    assert progress.estimate_seconds([spec_of(threads=4)], store)[0][1] == "registry"


def test_a_store_that_cannot_be_read_gives_registry_estimates(tmp_path):
    (tmp_path / "store" / "rows" / "added=2026-01-01").mkdir(parents=True)
    (tmp_path / "store" / "rows" / "added=2026-01-01" / "broken.parquet").write_text("not parquet")
    assert progress.estimate_seconds([spec_of()], tmp_path / "store")[0][1] == "registry"


def test_a_task_the_registry_cannot_estimate_is_unknown(monkeypatch):
    def refuse(spec):
        raise KeyError(spec.task)

    monkeypatch.setattr(progress, "registry_estimate", refuse)
    [(seconds, source)] = progress.estimate_seconds([spec_of()], None)
    assert math.isnan(seconds) and source == "unknown"


def test_the_store_read_is_history_or_an_existing_fwbench_history(tmp_path, monkeypatch):
    monkeypatch.delenv("FWBENCH_HISTORY", raising=False)
    assert progress.estimate_store(None) is None
    monkeypatch.setenv("FWBENCH_HISTORY", str(tmp_path / "missing"))
    assert progress.estimate_store(None) is None
    assert not (tmp_path / "missing").exists()  # never made just to be read
    monkeypatch.setenv("FWBENCH_HISTORY", str(tmp_path))
    assert progress.estimate_store(None) == tmp_path
    assert progress.estimate_store(tmp_path / "given") is None  # --history not made yet: nothing to read
    (tmp_path / "given").mkdir()
    assert progress.estimate_store(tmp_path / "given") == tmp_path / "given"


def test_what_is_left_is_scaled_by_how_the_estimates_came_true():
    state = progress.ProgressState([(10.0, "history"), (10.0, "history"), (20.0, "history"), (30.0, "history")])
    assert state.left().seconds == 70.0 and "scaled" not in state.left().how
    state.mark(0, 20.0)  # took twice its estimate
    left = state.left()
    assert left.seconds == 2 * (10 + 20 + 30)
    assert left.how == "history estimates for 3 of 3 cells left; scaled x2.00, observed/estimated over 1 cell done"
    assert state.line(25) == ("[1/4] 0:00:25 elapsed, about 0:02:00 left (history estimates for 3 of 3 cells left; "
                              "scaled x2.00, observed/estimated over 1 cell done)")


def test_each_source_is_scaled_by_its_own_cells_once_one_has_finished():
    state = progress.ProgressState([(10.0, "history"), (100.0, "registry"), (10.0, "history"), (100.0, "registry")])
    state.mark(0, 10.0)  # history came true
    assert state.left().seconds == 100 + 10 + 100  # registry's scaled by the pooled ratio (1.0) until one finishes
    state.mark(1, 50.0)  # the registry's estimate was twice the time
    left = state.left()
    assert left.seconds == 10 + 50
    assert left.how.startswith("history estimates for 1, registry estimates for 1 of 2 cells left; scaled "
                               "history x1.00, registry x0.50")


def test_resume_skipped_cells_count_as_done_without_time():
    state = progress.ProgressState([(10.0, "history")] * 3)
    state.mark(state.index_of(), None)  # skipped: an ok row was there
    assert state.finished == 1
    assert state.line(0) == "[1/3] 0:00:00 elapsed, about 0:00:20 left (history estimates for 2 of 2 cells left)"
    state.mark(state.index_of(), 5.0)
    assert state.left().seconds == 5.0  # only the cell that ran says how the estimates come true


def test_cells_without_an_estimate_are_said_and_counted_at_the_mean_cell():
    state = progress.ProgressState([(10.0, "registry"), (math.nan, "unknown"), (math.nan, "unknown")])
    assert state.line(0) == ("[0/3] 0:00:00 elapsed, about 0:00:10 left (registry estimates for 1 of 3 cells left; "
                             "2 without an estimate, not counted)")
    state.mark(0, 12.0)
    assert state.left().seconds == 24.0 and "counted at the mean cell so far" in state.left().how
    nothing = progress.ProgressState([(math.nan, "unknown")] * 2)
    assert "time left unknown" in nothing.line(3)


def test_the_last_line_says_all_done_and_cells_at_once_share_what_is_left():
    state = progress.ProgressState([(10.0, "history")] * 4, at_once=2)
    assert state.left().seconds == 20.0 and "2 cells at once" in state.left().how
    for index in range(4):
        state.mark(index, 10.0)
    assert state.line(3725) == "[4/4] 1:02:05 elapsed, all 4 cells done"


def test_finished_cells_are_matched_to_their_planned_ones():
    planned = [spec_of("bert-predict", 0), spec_of("bert-predict", 1), spec_of("bert-fit", 0)]
    state = progress.ProgressState([(1.0, "history"), (2.0, "history"), (30.0, "history")],
                                   [progress.plan_key(s) for s in planned])
    # The runner hands back a placed spec (its engine's pin set and device); it is still the planned bert-fit cell.
    placed = spec_of("bert-fit", 0, pin_set="paper-2024", device_model="Other CPU", cpu_set="0")
    assert state.index_of(progress.plan_key(placed)) == 2


def fake_result(spec, *, wall=None, skipped=False, status="ok"):
    row = {"status": status, "ms_per_step": 5.0, "first_step_s": 0.1, "error_message": "boom",
           "extra": {"process_s": wall} if wall is not None else {}}
    return SimpleNamespace(spec=spec, row=row, skipped=skipped, path=Path("x.parquet"))


def test_not_on_a_terminal_a_plain_line_follows_each_result_line():
    buffer = io.StringIO()
    console = Console(file=buffer, width=200)
    assert not console.is_terminal
    specs = [spec_of("bert-predict", 0), spec_of("bert-predict", 1)]
    now = [0.0]
    shown = progress.RunProgress(specs, [(10.0, "history"), (10.0, "history")], console, clock=lambda: now[0])
    with shown:
        now[0] = 20.0
        shown.finished(fake_result(specs[0], skipped=True))
        shown.started(specs[1])
        now[0] = 40.0
        shown.finished(fake_result(specs[1], wall=15.0))
    lines = buffer.getvalue().splitlines()
    assert lines[0].startswith("skip native-torch bert-predict [none] r0")
    assert lines[1] == "[1/2] 0:00:20 elapsed, about 0:00:10 left (history estimates for 1 of 1 cell left)"
    assert lines[2].startswith("ok native-torch bert-predict [none] r1: 5.00 ms/step")
    assert lines[3] == "[2/2] 0:00:40 elapsed, all 2 cells done"


def test_a_failing_display_never_fails_the_run(monkeypatch):
    import rich.progress

    class Broken:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("no live display today")

    monkeypatch.setattr(rich.progress, "Progress", Broken)
    buffer = io.StringIO()
    specs = [spec_of("bert-predict", 0)]
    shown = progress.RunProgress(specs, [(10.0, "history")], Console(file=buffer, width=200), live=True)
    with shown:
        shown.started(specs[0])
        shown.finished(fake_result(specs[0], wall=9.0))
    text = buffer.getvalue()
    assert "ok native-torch bert-predict [none] r0" in text and "[1/1]" in text


def test_on_a_terminal_the_bar_is_transient_and_result_lines_stay():
    buffer = io.StringIO()
    console = Console(file=buffer, width=200, force_terminal=True, color_system=None)
    specs = [spec_of("bert-predict", 0), spec_of("bert-fit", 0)]
    with progress.RunProgress(specs, [(10.0, "registry"), (10.0, "registry")], console) as shown:
        for spec in specs:
            shown.started(spec)
            shown.finished(fake_result(spec, wall=10.0))
    text = buffer.getvalue()
    assert "native-torch bert-predict [none] r0" in text and "native-torch bert-fit [none] r0" in text
    assert "[1/2]" not in text  # the bar says it, not a plain line


def fwbench(*args, env=None, timeout=300):
    return subprocess.run([*FWBENCH, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_run_prints_n_of_m_lines_when_not_on_a_terminal_and_reads_history(tmp_path):
    """Real cell processes (the current engine, a fault injected before any framework import): the first run
    estimates from the registry, the second from the rows the first added to --history."""
    args = ["run", "--stack", "native-torch", "--task", "bert-predict", "--task", "bert-fit", "--engine", "current",
            "--data", str(tmp_path / "data"), "--inject-fault", "raise", "--history", str(tmp_path / "store")]
    env = {"FWBENCH_HISTORY": ""}
    first = fwbench(*args, "--out", str(tmp_path / "a"), env=env)
    assert first.returncode == 1, first.stdout + first.stderr
    counted = [line for line in first.stdout.splitlines() if LINE.match(line)]
    assert [LINE.match(line).group(1, 2) for line in counted] == [("1", "2"), ("2", "2")], first.stdout
    assert "registry estimates for 1 of 1 cell left" in counted[0]
    assert counted[1].endswith("all 2 cells done")
    assert "injected fault" in first.stdout  # the result lines are still there
    second = fwbench(*args, "--out", str(tmp_path / "b"), env=env)
    assert "history estimates for 1 of 1 cell left" in second.stdout, second.stdout


def test_sweep_counts_cells_times_points(tmp_path, monkeypatch, capsys):
    """`fwbench sweep` in this process, its points' cells run by a stand-in that calls the callbacks as
    matrix.run_matrix does."""
    import numpy as np

    from fwbench.cli.commands import main
    from fwbench.engines import sweep as sweep_engine
    from fwbench.engines.matrix import CellResult
    from tests.aggregator_rows import samples

    rng = np.random.default_rng(5)

    def run_point(specs, point, out_dir, pin_set, device, *, on_start=lambda s: None, on_done=lambda r: None,
                  **kwargs):
        rows = []
        for spec in specs:
            placed = progress.placed_for_sweep([spec], point.label, pin_set, device)[0]
            rec = record("native-torch", spec.task, repeat=spec.repeat, step_ms=samples(rng, 10.0, n=10),
                         sweep_point=point.label, sweep_installed=point.label, first_step_s=0.1,
                         extra={"process_s": 3.0})
            path = write_row(rec, target_path(placed, out_dir, rec))
            on_start(placed)
            on_done(CellResult(placed, path, rec))
            rows.append(rec)
        return rows

    monkeypatch.setattr(sweep_engine, "run_point", run_point)
    monkeypatch.delenv("FWBENCH_HISTORY", raising=False)
    monkeypatch.setattr(sys, "argv", ["fwbench", "sweep", "--stack", "native-torch", "--task", "bert-predict",
                                      "--repeats", "2", "--device", "cpu", "--vary", "tqdm=1.0,1.1,1.2",
                                      "--out", str(tmp_path / "sweep")])
    with pytest.raises(SystemExit):
        main()
    printed = capsys.readouterr().out
    counted = [LINE.match(line).group(1, 2) for line in printed.splitlines() if LINE.match(line)]
    assert counted == [(str(n), "6") for n in range(1, 7)], printed
    assert "point tqdm==1.1" in printed
