"""`fwbench watch`: the newest releases the history lacks are measured, judged against the point before them, and a
change between two measured versions is bisected over the releases between them. The cell runner (run_point) is
replaced by a stand-in that writes rows at a chosen ms/step per version (the real-cell test is
test_watch_real_tiny_cells_find_and_bisect_a_planted_change)."""

from __future__ import annotations

import datetime as dt
import sys

import numpy as np
import pytest

from tests.aggregator_rows import LIBRARY_VERSIONS, record, samples
from tests.conftest import run_fwbench
from fwbench.core.results import target_path, write_row

START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def _stand_in(monkeypatch, centre_of, *, busy_at=(), calls=None):
    """run_point writing one row per planned spec at centre_of(version) ms/step (busy rows at busy_at)."""
    from fwbench.engines import sweep as sweep_engine
    from fwbench.harness.cell import base_record

    rng = np.random.default_rng(11)
    clock = {"n": 0}

    def run_point(specs, point, out, pin_set, device, **kwargs):
        if calls is not None:
            calls.append((point.version, len(specs)))
        _engine, planned = sweep_engine.point_specs(specs, point, pin_set, device)
        rows = []
        for spec in planned:
            clock["n"] += 1
            rec = record(spec.stack, spec.task, repeat=spec.repeat,
                         step_ms=samples(rng, centre_of(point.version), n=10, spread=0.01),
                         started_at=START + dt.timedelta(minutes=clock["n"]),
                         library_versions={**LIBRARY_VERSIONS, point.package: point.version})
            rec.update({key: value for key, value in base_record(spec).items()
                        if key not in ("record_id", "source_commit", "fwbench_version", "schema_version")})
            rec.update(sweep_point=point.label, sweep_installed=point.label, status="ok")
            if point.version in busy_at:
                rec.update(contention_busy=True, busy=True)
            write_row(rec, target_path(spec, out, rec))
            rows.append(rec)
            kwargs.get("on_done", lambda result: None)
        return rows

    monkeypatch.setattr(sweep_engine, "run_point", run_point)


def _watch(monkeypatch, capsys, args):
    from fwbench.cli.commands import main

    monkeypatch.setattr(sys, "argv", ["fwbench", "watch", "--stack", "native-torch", "--task", "bert-fit",
                                      "--device", "cpu", "--package", "tqdm", *args])
    with pytest.raises(SystemExit) as done:
        main()
    captured = capsys.readouterr()
    return done.value.code, " ".join((captured.out + captured.err).split())


def test_a_watch_measures_only_new_releases_and_bisects_a_change_between_two_nights(tmp_path, monkeypatch, capsys):
    """Night 1 measures the newest two releases; night 2 the one new release, 30% slower: the step from the point
    before it is slower, and the bisect over the two releases between them names the planted one."""
    store = tmp_path / "store"
    calls: list = []
    _stand_in(monkeypatch, lambda v: 13.0 if v >= "1.4" else 10.0, calls=calls)
    code, printed = _watch(monkeypatch, capsys, ["--versions", "1.0,1.1,1.2", "--newest", "2", "--store", str(store),
                                                 "--out", str(tmp_path / "night1")])
    assert code == 0, printed
    assert [v for v, _ in calls] == ["1.1", "1.2"] and all(n == 3 for _, n in calls)
    assert "tqdm 1.1 -> 1.2: equivalent" in printed and "no change found" in printed
    calls.clear()
    code, printed = _watch(monkeypatch, capsys, ["--versions", "1.0,1.1,1.2,1.3,1.4,1.5", "--store", str(store),
                                                 "--out", str(tmp_path / "night2")])
    assert code == 3, printed
    assert calls[0] == ("1.5", 3), calls  # 1.1 and 1.2 are in the history: not measured again
    assert "tqdm 1.2 -> 1.5: slower (x1.3" in printed
    assert "to bisect: tqdm 1.2 .. 1.5 (2 release(s) between, from the step)" in printed
    assert "changed (slower) between tqdm==1.3 and tqdm==1.4" in printed, printed
    summary = (tmp_path / "night2" / "watch.md").read_text()
    assert "changed (slower) between tqdm==1.3 and tqdm==1.4" in " ".join(summary.split())
    # Night 3, nothing new: nothing measured, and the bisect's points are in the history too.
    calls.clear()
    code, printed = _watch(monkeypatch, capsys, ["--versions", "1.0,1.1,1.2,1.3,1.4,1.5", "--store", str(store),
                                                 "--out", str(tmp_path / "night3"), "--no-bisect"])
    assert calls == [] and "0 not in the history" in printed
    from fwbench_aggregator import history

    stored = history.query(store)
    assert {"tqdm==1.3", "tqdm==1.4"} <= set(stored["sweep_point"])


def test_releases_this_python_cannot_install_are_not_watched_and_are_named(tmp_path, monkeypatch, capsys):
    """The index (the boundary: a stand-in page) lists 1.3 for Python >= 3.99 only: the watch measures 1.2, the
    newest this Python can install, and says what it left out. Before, it measured 1.3: an error row every night."""
    from fwbench.core import sweep as points

    page = {"files": [{"filename": f"tqdm-{v}-py3-none-any.whl", "requires-python": spec}
                      for v, spec in (("1.1", ">=3.8"), ("1.2", None), ("1.3", ">=3.99"))]}
    monkeypatch.setattr(points, "fetch_simple_json", lambda package, *a, **k: page)
    calls: list = []
    _stand_in(monkeypatch, lambda v: 10.0, calls=calls)
    code, printed = _watch(monkeypatch, capsys, ["--store", str(tmp_path / "store"), "--out", str(tmp_path / "n")])
    assert code == 0, printed
    assert [v for v, _ in calls] == ["1.2"]
    assert "1 release(s) left out that Python" in printed and "the newest 1.3 (requires-python >=3.99)" in printed
    assert "the newest 1.3 (requires-python >=3.99)" in (tmp_path / "n" / "watch.md").read_text()
    monkeypatch.setattr(points, "fetch_simple_json", lambda package, *a, **k: {"files": page["files"][2:]})
    code, printed = _watch(monkeypatch, capsys, ["--store", str(tmp_path / "store"), "--out", str(tmp_path / "m")])
    assert code == 2 and "no release of tqdm that Python" in printed


def test_adjacent_releases_pinpoint_a_change_without_a_bisect(tmp_path, monkeypatch, capsys):
    store = tmp_path / "store"
    calls: list = []
    _stand_in(monkeypatch, lambda v: 13.0 if v >= "1.2" else 10.0, calls=calls)
    _watch(monkeypatch, capsys, ["--versions", "1.0,1.1", "--store", str(store), "--out", str(tmp_path / "a")])
    code, printed = _watch(monkeypatch, capsys, ["--versions", "1.0,1.1,1.2", "--store", str(store),
                                                 "--out", str(tmp_path / "b")])
    assert code == 3, printed
    assert "the change is at tqdm 1.2: no release between 1.1 and 1.2" in printed
    assert [v for v, _ in calls] == ["1.1", "1.2"]  # no bisect point measured


def test_a_busy_new_point_decides_nothing(tmp_path, monkeypatch, capsys):
    store = tmp_path / "store"
    _stand_in(monkeypatch, lambda v: 13.0 if v >= "1.2" else 10.0, busy_at=("1.2",))
    _watch(monkeypatch, capsys, ["--versions", "1.0,1.1", "--store", str(store), "--out", str(tmp_path / "a")])
    code, printed = _watch(monkeypatch, capsys, ["--versions", "1.0,1.1,1.2", "--store", str(store),
                                                 "--out", str(tmp_path / "b")])
    assert code == 0, printed
    assert "tqdm 1.2 (new): busy only" in printed and "no change found" in printed


@pytest.mark.parametrize("args, message", [
    (["--versions", " , "], "no release of tqdm"),
    (["--versions", "1.0,main"], "not a release"),
    (["--versions", "1.0", "--repeats", "2"], "--repeats must be at least 3"),
    (["--versions", "1.0", "--newest", "0"], "--newest must be at least 1"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    proc = run_fwbench("watch", "--stack", "native-torch", "--task", "bert-fit", "--package", "tqdm",
                       "--store", str(tmp_path / "store"), "--out", str(tmp_path / "out"), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_store_that_is_a_file_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "store").write_text("not a store")
    proc = run_fwbench("watch", "--stack", "native-torch", "--task", "bert-fit", "--package", "tqdm",
                       "--versions", "1.0", "--store", str(tmp_path / "store"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.parquet"))


def test_a_sweep_s_rows_join_their_cell_s_series_by_version():
    """By version of a package, rows measured at that package's sweep points are points of one series (their cell
    with the sweep point blanked); by date, or by another package, they stay their own identities."""
    from fwbench.core.identity import CellIdentity
    from fwbench_aggregator.history_series import series_identity

    plain = CellIdentity.of_row(record("native-torch", "bert-fit"))
    swept = CellIdentity.of_row(record("native-torch", "bert-fit", sweep_point="tqdm==4.66.1"))
    assert swept != plain
    assert series_identity(swept, "tqdm") == plain
    assert series_identity(swept, "torch") == swept and series_identity(swept, None) == swept


@pytest.mark.integration
def test_watch_real_tiny_cells_find_and_bisect_a_planted_change(tmp_path, shared_data):
    """Real native-torch bert-predict cells at five real tqdm releases, each installed over the stack's lock; a
    delay planted in every step from tqdm 4.66.4 on (a test-only fault, recorded in the rows). Night 1 measures the
    newest two of 4.66.1-4.66.2, night 2 only 4.66.5 of 4.66.1-4.66.5, finds the step and bisects 4.66.3-4.66.4.
    Busy rows decide nothing: on a machine that made a point busy, the watch must say so and claim no change."""
    import pyarrow.parquet as pq

    store, out = tmp_path / "store", tmp_path / "watch"
    common = ["watch", "--stack", "native-torch", "--task", "bert-predict", "--steps", "5", "--warmup", "1",
              "--threads", "1", "--data", str(shared_data), "--package", "tqdm", "--store", str(store),
              "--out", str(out), "--inject-fault", "step-sleep-from:tqdm==4.66.4:40",
              # Processes of a tiny CPU cell differ by more than 5%: a 5% band could not show a release without
              # the delay equivalent to the good end, and the bisect would stop undecided.
              "--tolerance", "50"]
    night1 = run_fwbench(*common, "--versions", "4.66.1,4.66.2", "--newest", "2", timeout=1200)
    assert night1.returncode in (0, 3) and "Traceback" not in night1.stderr, night1.stdout + night1.stderr

    def rows_by_point():
        found = {}
        for path in out.rglob("*.parquet"):
            row = pq.read_table(path).to_pylist()[0]
            found.setdefault(row["sweep_point"], []).append(row)
        return found

    def quiet(rows):
        return sum(1 for row in rows if row["status"] == "ok" and not row.get("busy"))

    first = rows_by_point()
    baseline = next((v for v in ("4.66.2", "4.66.1") if quiet(first.get(f"tqdm=={v}", [])) >= 3), None)
    if baseline is None:  # no point of night 1 decides: night 2 would have nothing to compare with
        assert night1.returncode == 0 and "no change found" in night1.stdout, night1.stdout
        pytest.skip("night 1's rows were busy (a loaded machine): no point decides, and the watch claimed nothing, "
                    "as it must; the found-and-bisected path needs a quieter machine")
    night2 = run_fwbench(*common, "--versions", "4.66.1,4.66.2,4.66.3,4.66.4,4.66.5", timeout=1200)
    printed = " ".join(night2.stdout.split())
    assert "Traceback" not in night2.stderr, night2.stderr
    assert "newest 1 of 5 release(s) (4.66.5); 1 not in the history" in printed, printed
    found = rows_by_point()
    assert all(row["status"] == "ok" for rows in found.values() for row in rows)
    planted = {point for point, rows in found.items()
               if any("injected_fault" in (row.get("extra") or "") for row in rows)}
    assert planted and planted <= {"tqdm==4.66.4", "tqdm==4.66.5"} and "tqdm==4.66.5" in planted
    if quiet(found["tqdm==4.66.5"]) < 3:  # a busy new point decides nothing: no change may be claimed from it
        assert night2.returncode == 0 and "no change found" in printed, printed
        pytest.skip("the new version's rows were busy (a loaded machine): the watch claimed nothing, as it must")
    assert night2.returncode == 3, night2.stdout + night2.stderr
    assert f"tqdm {baseline} -> 4.66.5: slower" in printed and f"to bisect: tqdm {baseline} .. 4.66.5" in printed
    # undecided or inconclusive: a middle point's rows were busy, and the bisect says it could not place the change.
    assert any(text in printed for text in ("changed (slower) between tqdm==4.66.3 and tqdm==4.66.4", "undecided",
                                            "inconclusive")), printed


@pytest.mark.parametrize("kind, expected", [
    ("cron", ["30 4 * * * cd ", "flock -n ", "watch --stack native-torch", "--package tqdm", ">> "]),
    ("systemd", ["OnCalendar=*-*-* 04:30:00", "ExecStart=", "watch --stack native-torch", "SuccessExitStatus=3"]),
    ("slurm", ["#SCRON --cpus-per-task=", "#SCRON --time=", "30 4 * * * ", "watch --stack native-torch"]),
    ("k8s", ["kind: CronJob", "schedule: 30 4 * * *", "concurrencyPolicy: Forbid", "- /results/watch",
             "claimName: fwbench-results", "runAsNonRoot: true"]),
])
def test_schedule_renders_the_same_watch_for_each_scheduler(tmp_path, kind, expected):
    """--schedule runs nothing: it prints an entry that runs this watch (less the schedule's own options) daily."""
    proc = run_fwbench("watch", "--stack", "native-torch", "--task", "bert-fit", "--package", "tqdm",
                       "--out", str(tmp_path / "out"), "--schedule", kind, "--at", "04:30", "--image", "reg/fw@sha256:1")
    assert proc.returncode == 0, proc.stderr
    for text in expected:
        assert text in proc.stdout, (text, proc.stdout)
    assert "--schedule" not in proc.stdout and "--at" not in proc.stdout and not (tmp_path / "out").exists()
    if kind == "k8s":
        import yaml

        job = yaml.safe_load(proc.stdout)
        pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        assert [v["name"] for v in pod["volumes"]] == ["results", "data", "tmp", "shm"]  # no plan ConfigMap


@pytest.mark.parametrize("args, message", [
    (["--schedule", "at"], "--schedule must be one of cron, systemd, k8s, slurm"),
    (["--schedule", "cron", "--at", "25:00"], "--at must be HH:MM"),
    (["--schedule", "k8s"], "--schedule k8s needs --image"),
])
def test_schedule_bad_input_is_one_line(tmp_path, args, message):
    proc = run_fwbench("watch", "--stack", "native-torch", "--task", "bert-fit", "--package", "tqdm",
                       "--out", str(tmp_path / "out"), *args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_package_the_rows_do_not_track_is_read_from_their_sweep_point():
    """native-torch's rows track torch and transformers, not tqdm: a watch of tqdm reads each row's version from the
    sweep point it was measured at (sweep_installed), and a row at no point of it is left out, counted."""
    import pandas as pd

    from fwbench_aggregator import history_series

    rng = np.random.default_rng(5)
    rows = [record("native-torch", "bert-fit", repeat=r, step_ms=samples(rng, 10.0, n=5), sweep_point=f"tqdm=={v}",
                   sweep_installed=f"tqdm=={v}", started_at=START + dt.timedelta(minutes=10 * i + r))
            for i, v in enumerate(("4.66.1", "4.66.2")) for r in range(3)]
    rows.append(record("native-torch", "bert-fit", step_ms=samples(rng, 10.0, n=5)))  # the lock's, no tqdm recorded
    [series] = history_series.build(pd.DataFrame(rows), "version:tqdm")
    assert [(p.at, p.processes) for p in series.points] == [("4.66.1", 3), ("4.66.2", 3)]
    assert series.left_out == 1


def test_a_family_point_names_each_member_it_installed():
    """A jax point's rows say "jax==0.10.1; jaxlib==0.10.1" in sweep_installed: a series over jaxlib's versions reads
    jaxlib's from there, where rows do not track it. Before, that text read as no point (it is not one label) and the
    sweep point (jax's) was of another package: every row was left out."""
    import pandas as pd

    from fwbench_aggregator import history_series

    rng = np.random.default_rng(5)
    tracked = {k: v for k, v in LIBRARY_VERSIONS.items() if k not in ("jax", "jaxlib")}
    rows = [record("keras3-jax", "bert-fit", repeat=r, step_ms=samples(rng, 10.0, n=5), sweep_point=f"jax=={v}",
                   sweep_installed=f"jax=={v}; JAXlib=={v}", library_versions=tracked,
                   started_at=START + dt.timedelta(minutes=10 * i + r))
            for i, v in enumerate(("0.10.1", "0.10.2")) for r in range(3)]
    [series] = history_series.build(pd.DataFrame(rows), "version:jaxlib")
    assert [(p.at, p.processes) for p in series.points] == [("0.10.1", 3), ("0.10.2", 3)] and series.left_out == 0


def test_schedule_k8s_puts_the_results_in_the_claim_whichever_name_out_was_given_by(tmp_path):
    proc = run_fwbench("watch", "--stack", "native-torch", "--task", "bert-fit", "--package", "tqdm",
                       "-o", str(tmp_path / "out"), "--schedule", "k8s", "--image", "reg/fw@sha256:1")
    assert proc.returncode == 0, proc.stderr
    import yaml

    args = yaml.safe_load(proc.stdout)["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "-o" not in args and str(tmp_path / "out") not in args and args[args.index("--out") + 1] == "/results/watch"


def test_a_version_measured_in_two_environments_is_judged_like_with_like_and_says_which():
    """Rows of tqdm 4.66.1 and 4.66.2 each in two environments (transformers 4.38.2 and 4.39.0): each new point is
    judged against the point before it in its own environment, named in the line. Only the 4.39.0 environment
    slowed down (x1.3); before, the watch took the version's last point and compared it with the last point of
    the version before, whichever environments they were."""
    import pandas as pd

    from fwbench_aggregator import watch

    rng = np.random.default_rng(7)
    centre = {("4.66.1", "4.38.2"): 10.0, ("4.66.2", "4.38.2"): 10.0,
              ("4.66.1", "4.39.0"): 10.0, ("4.66.2", "4.39.0"): 13.0}
    rows, minute = [], 0
    for version in ("4.66.1", "4.66.2"):
        # The slowed environment first, so that the version's last point is the unchanged one.
        for transformers in ("4.39.0", "4.38.2"):
            for repeat in range(3):
                minute += 1
                rows.append(record("native-torch", "bert-fit", repeat=repeat,
                                   step_ms=samples(rng, centre[(version, transformers)], n=10, spread=0.01),
                                   started_at=START + dt.timedelta(minutes=minute),
                                   library_versions={**LIBRARY_VERSIONS, "transformers": transformers,
                                                     "tqdm": version}))
    known = watch.series_by_identity(pd.DataFrame(rows), "tqdm")
    [identity] = known
    [cell] = watch.assess(known, [identity], ["4.66.2"], ["4.66.1", "4.66.2"], tolerance_pct=5.0)
    by_environment = {step.environment: step for step in cell.steps}
    assert set(by_environment) == {"transformers 4.38.2", "transformers 4.39.0"}
    assert by_environment["transformers 4.39.0"].step.changed
    assert not by_environment["transformers 4.38.2"].step.changed
    assert [(b.before, b.after) for b in cell.brackets] == [("4.66.1", "4.66.2")]
    text = "\n".join(watch.lines([cell], "tqdm", 5.0))
    assert "tqdm 4.66.1 -> 4.66.2 (transformers 4.39.0): " in text
    assert "tqdm 4.66.2 (transformers 4.38.2) (new): " in text


def test_a_change_point_in_one_of_two_environments_side_by_side_is_bracketed_within_its_environment():
    """tqdm 4.66.1-4.66.8, each in two environments measured side by side (transformers 4.38.2, and 4.39.0 20%
    faster), both 15% slower from 4.66.5: each environment's change point is found and bracketed 4.66.4 .. 4.66.5,
    between that environment's own points. Before, the two environments' points were one interleaved series and
    no change point was found."""
    import pandas as pd

    from fwbench_aggregator import watch

    rng = np.random.default_rng(9)
    versions = [f"4.66.{n}" for n in range(1, 9)]
    rows, minute = [], 0
    for version in versions:
        for transformers, centre in (("4.38.2", 10.0), ("4.39.0", 8.0)):
            for repeat in range(3):
                minute += 1
                rows.append(record("native-torch", "bert-fit", repeat=repeat,
                                   step_ms=samples(rng, centre * (1.15 if version >= "4.66.5" else 1.0), n=10,
                                                   spread=0.01),
                                   started_at=START + dt.timedelta(minutes=minute),
                                   library_versions={**LIBRARY_VERSIONS, "transformers": transformers,
                                                     "tqdm": version}))
    known = watch.series_by_identity(pd.DataFrame(rows), "tqdm")
    [identity] = known
    [cell] = watch.assess(known, [identity], ["4.66.8"], versions, tolerance_pct=5.0)
    assert [(p.at, p.environment) for p, _ in cell.series.changes] == [("4.66.5", "transformers 4.38.2"),
                                                                       ("4.66.5", "transformers 4.39.0")]
    assert [(b.before, b.after, b.why) for b in cell.brackets] == [("4.66.4", "4.66.5", "change point")]
    text = "\n".join(watch.lines([cell], "tqdm", 5.0))
    assert "change point at tqdm 4.66.5 (transformers 4.39.0): x1.1" in text


def test_a_watch_of_jax_judges_each_release_beside_its_own_jaxlib():
    """A jax point moves jaxlib with it (jax refuses another jaxlib), so every release's rows carry their own jaxlib:
    that is the axis, not another environment. Before, each release's jaxlib made it an environment of its own: the
    new release found "no earlier point that decides in the same environment" and a 30% slowdown went unseen."""
    import pandas as pd

    from fwbench_aggregator import history_series, watch

    rng = np.random.default_rng(5)
    versions = ["0.10.0", "0.10.1", "0.10.2"]
    rows, minute = [], 0
    for version in versions:
        for repeat in range(3):
            minute += 1
            rows.append(record("keras3-jax", "bert-fit", repeat=repeat,
                               step_ms=samples(rng, 13.0 if version == "0.10.2" else 10.0, n=10, spread=0.01),
                               started_at=START + dt.timedelta(minutes=minute),
                               library_versions={**LIBRARY_VERSIONS, "jax": version, "jaxlib": version}))
    known = watch.series_by_identity(pd.DataFrame(rows), "jax")
    [identity] = known
    [cell] = watch.assess(known, [identity], ["0.10.2"], versions, tolerance_pct=5.0)
    assert [p.environment for p in cell.series.points] == ["", "", ""] and cell.series.tracks == 1
    [step] = cell.steps
    assert (step.before, step.after, step.environment) == ("0.10.1", "0.10.2", "") and step.step.changed
    assert [(b.before, b.after) for b in cell.brackets] == [("0.10.1", "0.10.2")]
    # The family a jax point moves is the axis too (its CUDA plugins on a GPU).
    assert history_series.axis_names("jax") >= {"jax", "jaxlib", "jax-cuda12-plugin"}
