"""The results history (issue 52, parts 1 and 2): a store that never loses or doubles a row, even when an add is killed,
read with DuckDB; each cell's series over date or version, and the judge's change points in it (busy rows never
decide, environments never pooled). Rows are written by the project's own writer (tests/aggregator_rows.py)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fwbench.cli.commands import app
from fwbench_aggregator import history, history_series, judge
from tests.aggregator_rows import LIBRARY_VERSIONS, record, write

ROOT = Path(__file__).resolve().parents[1]
DAY0 = dt.datetime(2026, 10, 1, 3, 0, tzinfo=dt.timezone.utc)


def day_rows(out: Path, day: int, centre: float, *, repeats: int = 3, rng=None, spread: float = 0.01,
             stack: str = "keras3-jax", task: str = "bert-fit", hour: int = 0, **extra) -> None:
    """One night's run of a cell: `repeats` processes around `centre` ms/step, into out/d<day>(-<hour>)."""
    rng = rng or np.random.default_rng(day)
    for repeat in range(repeats):
        steps = centre * np.exp(rng.normal(0, spread, 20))
        write(out / f"d{day}-{hour}", record(stack, task, repeat=repeat, step_ms=steps,
                                             started_at=DAY0 + dt.timedelta(days=day, hours=hour, seconds=repeat),
                                             **extra))


def stored(store: Path):
    return history.query(store)


# --- the store ------------------------------------------------------------------------------------------------------

def test_adding_the_same_rows_twice_stores_each_once(tmp_path):
    for day in range(3):
        day_rows(tmp_path / "res", day, 20.0)
    first = history.add(tmp_path / "store", [tmp_path / "res"])
    again = history.add(tmp_path / "store", [tmp_path / "res", tmp_path / "res" / "d1-0"])
    assert (first.new, first.already) == (9, 0)
    assert (again.new, again.file) == (0, None) and again.already == 9
    frame = stored(tmp_path / "store")
    assert len(frame) == 9 and frame["record_id"].is_unique
    assert len(history.store_files(tmp_path / "store")) == 1


def test_a_row_is_known_by_its_measurement_and_two_runs_of_one_cell_repeat_are_both_kept(tmp_path):
    day_rows(tmp_path / "a", 0, 20.0, repeats=1)
    day_rows(tmp_path / "b", 1, 21.0, repeats=1)  # the same cell and repeat, another night: another measurement
    history.add(tmp_path / "store", [tmp_path / "a", tmp_path / "b"])
    # The first night's row written again under a new record id (a copy re-written by another tool).
    original = next((tmp_path / "a").rglob("*.parquet"))
    from fwbench.core.results import read_row, write_row

    row = read_row(original)
    write_row({**row, "record_id": "rewritten"}, tmp_path / "c" / "copy.parquet")
    added = history.add(tmp_path / "store", [tmp_path / "c"])
    assert added.new == 0 and len(stored(tmp_path / "store")) == 2


def test_a_store_file_copied_in_twice_is_still_read_once(tmp_path):
    day_rows(tmp_path / "res", 0, 20.0)
    added = history.add(tmp_path / "store", [tmp_path / "res"])
    shutil.copy(added.file, added.file.with_name("copied-by-hand.parquet"))
    assert len(history.store_files(tmp_path / "store")) == 2
    assert len(stored(tmp_path / "store")) == 3


DIE = """
import os, signal, sys
from pathlib import Path
from fwbench_aggregator import history

real_replace = os.replace

def replace_then_die(source, target):
    if sys.argv[3] == "after-rename":
        real_replace(source, target)
    os.kill(os.getpid(), signal.SIGKILL)  # killed with the new file written, before (or right after) its rename

os.replace = replace_then_die
history.add(Path(sys.argv[1]), [Path(sys.argv[2])])
"""


@pytest.mark.parametrize("moment", ["before-rename", "after-rename"])
def test_a_killed_add_loses_no_row_and_doubles_none(tmp_path, moment):
    store = tmp_path / "store"
    day_rows(tmp_path / "old", 0, 20.0)
    history.add(store, [tmp_path / "old"])
    for day in (1, 2):
        day_rows(tmp_path / "new", day, 20.0)
    killed = subprocess.run([sys.executable, "-c", DIE, str(store), str(tmp_path / "new"), moment],
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    leftovers = list((store / history.ROWS).rglob("*.tmp"))
    frame = stored(store)
    if moment == "before-rename":
        assert len(leftovers) == 1 and len(frame) == 3  # the old rows, none of the killed add's
    else:
        assert not leftovers and len(frame) == 9  # the killed add's file is whole
    again = history.add(store, [tmp_path / "old", tmp_path / "new"])
    frame = stored(store)
    assert len(frame) == 9 and frame["record_id"].is_unique and again.new == (6 if moment == "before-rename" else 0)
    assert not list((store / history.ROWS).rglob("*.tmp"))  # the next add removes a killed add's temporary file


def test_two_adds_at_once_store_each_row_once(tmp_path):
    for day in range(4):
        day_rows(tmp_path / "res", day, 20.0)
    add = "import sys; from pathlib import Path; from fwbench_aggregator import history; " \
          "history.add(Path(sys.argv[1]), [Path(sys.argv[2])])"
    both = [subprocess.Popen([sys.executable, "-c", add, str(tmp_path / "store"), str(tmp_path / "res")])
            for _ in range(2)]
    assert [p.wait(timeout=120) for p in both] == [0, 0]
    assert len(stored(tmp_path / "store")) == 12


def test_the_query_filters_by_stack_and_task(tmp_path):
    day_rows(tmp_path / "res", 0, 20.0)
    day_rows(tmp_path / "res2", 0, 30.0, stack="keras3-torch", compile_mode="none")
    history.add(tmp_path / "store", [tmp_path / "res", tmp_path / "res2"])
    assert set(history.query(tmp_path / "store", stacks=["keras3-torch"])["stack"]) == {"keras3-torch"}
    assert len(history.query(tmp_path / "store", tasks=["sam-predict"])) == 0


def test_the_default_store_follows_fwbench_history_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("FWBENCH_HISTORY", str(tmp_path / "h"))
    assert history.default_store() == tmp_path / "h"
    monkeypatch.delenv("FWBENCH_HISTORY")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert history.default_store() == tmp_path / "data" / "fwbench" / "history"


# --- series and change points ---------------------------------------------------------------------------------------

def nightly(out: Path, centres, *, rng_seed: int = 0, spread: float = 0.01, **extra) -> None:
    rng = np.random.default_rng(rng_seed)
    for day, centre in enumerate(centres):
        day_rows(out, day, centre, rng=rng, spread=spread, **extra)


def series_of(store: Path, by: str = "date"):
    [found] = history_series.build(history.query(store), by)
    return found


def test_a_planted_15_percent_step_is_found_where_it_is(tmp_path):
    rng = np.random.default_rng(52)
    centres = 20.0 * np.exp(rng.normal(0, 0.02, 30)) * np.where(np.arange(30) >= 17, 1.15, 1.0)
    nightly(tmp_path / "res", centres)
    history.add(tmp_path / "store", [tmp_path / "res"])
    series = series_of(tmp_path / "store")
    assert len(series.points) == 30 and all(p.processes == 3 for p in series.points)
    [(point, change)] = series.changes
    assert point.at == (DAY0 + dt.timedelta(days=17)).date().isoformat()
    assert change.word == judge.SLOWER and 1.10 < change.ratio < 1.20


def test_a_flat_series_has_no_change():
    rng = np.random.default_rng(7)
    for _ in range(20):
        assert judge.change_points(20.0 * np.exp(rng.normal(0, 0.03, 30))) == []


def test_the_judge_finds_a_step_in_a_plain_series_and_ignores_one_below_the_minimum_step():
    rng = np.random.default_rng(3)
    noise = np.exp(rng.normal(0, 0.01, 30))
    [change] = judge.change_points(10.0 * noise * np.where(np.arange(30) >= 12, 0.85, 1.0))
    assert change.index == 12 and change.word == judge.FASTER
    assert judge.change_points(10.0 * noise * np.where(np.arange(30) >= 12, 1.03, 1.0)) == []  # under 5%: no change


def test_busy_rows_never_make_a_change(tmp_path):
    nightly(tmp_path / "res", [20.0] * 30, rng_seed=1)
    # From the 15th night on, two more processes a night ran while something competed: 30% slower, marked busy.
    rng = np.random.default_rng(2)
    for day in range(15, 30):
        for repeat in (3, 4):
            write(tmp_path / "res" / f"busy{day}", record(
                "keras3-jax", "bert-fit", repeat=repeat, step_ms=26.0 * np.exp(rng.normal(0, 0.01, 20)), busy=True,
                busy_reasons="load", started_at=DAY0 + dt.timedelta(days=day, seconds=repeat)))
    history.add(tmp_path / "store", [tmp_path / "res"])
    series = series_of(tmp_path / "store")
    assert series.changes == []
    assert [p.busy for p in series.points] == [0] * 15 + [2] * 15
    assert all(p.processes == 3 for p in series.points)


def test_a_night_in_two_environments_is_two_points_never_pooled(tmp_path):
    nightly(tmp_path / "res", [20.0] * 3)
    newer = {**LIBRARY_VERSIONS, "torch": "2.3.0"}
    day_rows(tmp_path / "res", 1, 24.0, hour=5, library_versions=newer)  # the second night also ran on torch 2.3.0
    history.add(tmp_path / "store", [tmp_path / "res"])
    series = series_of(tmp_path / "store")
    second = [p for p in series.points if p.at == (DAY0 + dt.timedelta(days=1)).date().isoformat()]
    assert sorted(p.environment for p in second) == ["torch 2.2.1", "torch 2.3.0"]
    assert sorted(round(p.median_ms) for p in second) == [20, 24]


def test_environments_measured_side_by_side_are_judged_apart_and_a_step_both_take_is_found_in_each(tmp_path):
    """Torch 2.3.0 ran beside 2.2.1 from the fourth night on, 20% faster, and both got 15% slower on the tenth night.
    Before, the two environments' points were one interleaved sequence: the offset between them was the series'
    point-to-point noise, the penalty grew with it, and no change was found."""
    def step(day):
        return 1.15 if day >= 9 else 1.0

    nightly(tmp_path / "res", [20.0 * step(day) for day in range(15)])
    newer = {**LIBRARY_VERSIONS, "torch": "2.3.0"}
    rng = np.random.default_rng(5)
    for day in range(3, 15):
        day_rows(tmp_path / "res", day, 16.0 * step(day), hour=5, rng=rng, library_versions=newer)
    history.add(tmp_path / "store", [tmp_path / "res"])
    series = series_of(tmp_path / "store")
    tenth = (DAY0 + dt.timedelta(days=9)).date().isoformat()
    assert [(p.at, p.environment, c.word) for p, c in series.changes] == [(tenth, "torch 2.2.1", judge.SLOWER),
                                                                          (tenth, "torch 2.3.0", judge.SLOWER)]
    assert series.tracks == 2
    assert all(1.10 < c.ratio < 1.20 for _, c in series.changes)
    assert [series.deciding_before(p).at for p, _ in series.changes] == [
        (DAY0 + dt.timedelta(days=8)).date().isoformat()] * 2
    assert "2 environments measured side by side: each one's points are judged apart" in "\n".join(
        history_series.lines([series], "date"))


def test_an_environment_that_follows_another_continues_its_series_and_labels_the_change(tmp_path):
    """Torch 2.2.1 for ten nights, then 2.3.0 (never both on one night), 15% slower: one track, so the change that
    came with the upgrade is found, at its first night, named by its environment."""
    nightly(tmp_path / "res", [20.0] * 10)
    newer = {**LIBRARY_VERSIONS, "torch": "2.3.0"}
    rng = np.random.default_rng(6)
    for day in range(10, 20):
        day_rows(tmp_path / "res", day, 23.0, rng=rng, library_versions=newer)
    history.add(tmp_path / "store", [tmp_path / "res"])
    series = series_of(tmp_path / "store")
    assert series.tracks == 1
    [(point, change)] = series.changes
    assert point.at == (DAY0 + dt.timedelta(days=10)).date().isoformat() and point.environment == "torch 2.3.0"
    assert change.word == judge.SLOWER
    assert "side by side" not in "\n".join(history_series.lines([series], "date"))


def test_environment_tracks_split_overlapping_spans_and_continue_the_nearest_environment():
    old, new = (("torch", "2.2.1"),), (("torch", "2.3.0"),)
    warm = (("compile cache", "warm"), ("torch", "2.3.0"))
    # old on 0-4, new on 5-9 (it follows old), warm on 3-9 (beside both): two tracks.
    points = [(old, i) for i in range(5)] + [(new, i) for i in range(5, 10)] + [(warm, i) for i in range(3, 10)]
    assert judge.environment_tracks(points) == [0] * 10 + [1] * 7
    # Two environments side by side on 0-2, then one that could follow either: it follows the one it differs from
    # in fewer facts (the cache state it keeps), not the first track.
    cold_a, warm_a = (("cache", "cold"), ("jax", "0.4")), (("cache", "warm"), ("jax", "0.4"))
    warm_b = (("cache", "warm"), ("jax", "0.5"))
    points = [(cold_a, i) for i in range(3)] + [(warm_a, i) for i in range(3)] + [(warm_b, i) for i in range(3, 6)]
    assert judge.environment_tracks(points) == [0] * 3 + [1] * 3 + [1] * 3
    assert judge.environment_tracks([]) == []


def test_by_version_orders_versions_as_versions_and_leaves_out_rows_without_the_package(tmp_path):
    for day, version in enumerate(["2.9.0", "2.10.0", "2.9.0"]):
        day_rows(tmp_path / "res", day, 20.0, library_versions={**LIBRARY_VERSIONS, "torch": version})
    day_rows(tmp_path / "res", 5, 20.0, repeats=1, library_versions={"jax": "0.4.30"})
    history.add(tmp_path / "store", [tmp_path / "res"])
    series = series_of(tmp_path / "store", "version:torch")
    assert [p.at for p in series.points] == ["2.9.0", "2.10.0"]
    assert [p.processes for p in series.points] == [6, 3] and series.left_out == 1


def test_a_point_of_too_few_processes_is_shown_and_decides_nothing(tmp_path):
    nightly(tmp_path / "res", [20.0] * 3)
    day_rows(tmp_path / "res", 7, 30.0, repeats=1)
    history.add(tmp_path / "store", [tmp_path / "res"])
    series = series_of(tmp_path / "store")
    assert [p.decides for p in series.points] == [True, True, True, False]
    assert "decides nothing" in "\n".join(history_series.lines([series], "date"))


def test_the_rule_is_the_one_the_benchmark_chose():
    """judge.CHANGE_PENALTY is the penalty benchmarks/history_change_points.py chose, at the judge's other settings."""
    result = json.loads((ROOT / "benchmarks/results/2026-11-28-cpu-amd-epyc-2-cores/history-change-points.json")
                        .read_text())
    assert result["chosen_penalty"] == judge.CHANGE_PENALTY
    settings = result["settings"]
    assert (settings["min_step_pct"], settings["min_points"]) == (judge.CHANGE_MIN_STEP_PCT, judge.CHANGE_MIN_POINTS)
    assert all(row["target_met"] for row in result["rows"])


# --- the command line -----------------------------------------------------------------------------------------------

def invoke(*args):
    return CliRunner().invoke(app, ["history", *map(str, args)])


def test_history_add_and_show_from_the_command_line(tmp_path):
    nightly(tmp_path / "res", [20.0] * 6 + [23.0] * 6)
    added = invoke("add", tmp_path / "res", "--store", tmp_path / "store")
    assert added.exit_code == 0 and "36 new row(s), 0 already there" in added.output
    shown = invoke("show", "--store", tmp_path / "store", "--stack", "keras3-jax")
    assert shown.exit_code == 0, shown.output
    assert "keras3-jax.bert-fit.tiny.compile-xla" in shown.output and "x1.150, slower" in shown.output


@pytest.mark.parametrize("args, message", [
    (["show", "--by", "commit"], "--by must be 'date' or 'version:PACKAGE'"),
    (["show", "--stack", "nope"], "unknown stack 'nope'"),
    (["show"], "holds no rows yet"),
    (["add", "{tmp}/missing"], "no such file or directory"),
    (["add", "{tmp}/empty"], "no result files"),
])
def test_bad_input_is_one_line_and_non_zero(tmp_path, args, message):
    (tmp_path / "empty").mkdir()
    done = subprocess.run([sys.executable, "-m", "fwbench.cli", "history",
                           *[arg.format(tmp=tmp_path) for arg in args], "--store", str(tmp_path / "store")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and done.stderr.startswith("error: ")
    assert message in done.stderr


def test_a_store_that_is_a_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "store").write_text("not a folder")
    day_rows(tmp_path / "res", 0, 20.0, repeats=1)
    done = invoke("add", tmp_path / "res", "--store", tmp_path / "store")
    assert done.exit_code == 2 and "is a file, not a folder" in done.output and "Traceback" not in done.output


def test_run_history_adds_the_runs_rows(tmp_path):
    """`fwbench run --history STORE`: a failing cell's row (injected before any framework loads) lands in the store."""
    env = {**os.environ, "FWBENCH_HISTORY": ""}
    done = subprocess.run([sys.executable, "-m", "fwbench.cli", "run", "--stack", "native-torch", "--task",
                           "bert-predict", "--engine", "current", "--out", str(tmp_path / "out"), "--data",
                           str(tmp_path / "data"), "--inject-fault", "raise", "--history", str(tmp_path / "store")],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 1 and "1 new row(s), 0 already there" in done.stdout, done.stdout + done.stderr
    frame = stored(tmp_path / "store")
    assert list(frame["status"]) == ["error"]
