"""`fwbench bisect`: it judges only the cell it was asked about, spends alpha over its repeated looks, and marks a
middle point placed without a test. The cell runner is replaced by a stand-in that writes synthetic rows."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.aggregator_rows import record, samples
from fwbench.core.results import target_path, write_row
from fwbench.core.spec import CellSpec


def _write(out, task, label, centre, repeat, rng, spread=0.01):
    rec = record("native-torch", task, repeat=repeat, step_ms=samples(rng, centre, n=10, spread=spread),
                 sweep_point=label, sweep_installed=label)
    spec = CellSpec("native-torch", task, "tiny", "none", "/d", 10, repeat=repeat, sweep_point=label)
    write_row(rec, target_path(spec, out, rec))
    return rec


def _run_bisect(monkeypatch, capsys, out, centre_of, args):
    """`fwbench bisect` in this process, with run_point writing bert-fit rows at centre_of(label) ms/step."""
    from fwbench.cli.commands import main
    from fwbench.engines import sweep as sweep_engine

    rng = np.random.default_rng(7)
    written: dict[str, list[dict]] = {}

    def run_point(specs, point, out_dir, pin_set, device, **kwargs):
        rows = written.setdefault(point.label, [])
        for spec in specs[len(rows):]:  # resume: the repeats already there are kept
            rows.append(_write(out_dir, spec.task, point.label, centre_of(point.label), spec.repeat, rng))
        return list(rows)

    monkeypatch.setattr(sweep_engine, "run_point", run_point)
    monkeypatch.setattr(sys, "argv", ["fwbench", "bisect", "--stack", "native-torch", "--task", "bert-fit",
                                      "--device", "cpu", "--out", str(out), *args])
    with pytest.raises(SystemExit) as done:
        main()
    return done.value.code, capsys.readouterr().out


def test_bisect_judges_only_its_cell_with_another_cells_rows_in_out(tmp_path, monkeypatch, capsys):
    """An earlier sweep left sam-predict rows (no change) at the same points in --out; bert-fit is 29% slower from
    tqdm 1.1 on. The bisect must judge bert-fit, not the first cell it finds."""
    out = tmp_path / "bisect"
    rng = np.random.default_rng(3)
    labels = ["tqdm==1.0", "tqdm==1.1", "tqdm==1.2"]
    for label in labels:
        for repeat in range(9):
            _write(out, "sam-predict", label, 50.0, repeat, rng, spread=0.002)
    code, printed = _run_bisect(monkeypatch, capsys, out, lambda label: 10.0 if label == "tqdm==1.0" else 12.9,
                                ["--package", "tqdm", "--versions", "1.0,1.1,1.2", "--good", "1.0", "--bad", "1.2"])
    assert code == 0, printed
    assert "changed (slower) between tqdm==1.0 and tqdm==1.1" in " ".join(printed.split()), printed
    assert "nothing to bisect" not in printed
    assert "also holds rows of 1 other cell(s)" in " ".join(printed.split())
    assert "12.9" in printed and "50.0" not in printed  # the bert-fit medians are printed, not sam-predict's


def test_looks_and_the_alpha_split():
    from fwbench.engines.sweep import bisect_looks, look_level

    assert bisect_looks(3, 9) == [3, 6, 9] and bisect_looks(5, 9) == [5, 8, 9] and bisect_looks(3, 3) == [3]
    assert look_level(0.05, [3, 6, 9]) == pytest.approx(0.05 / 3) and look_level(0.05, [9]) == 0.05


def test_the_end_check_judges_every_look_at_alpha_over_the_looks(tmp_path):
    """Ends whose 3 repeats differ by x1.055 at two-sided p 0.031: "slower" at 5%, not at 5%/3. With looks at 3,
    6 and 9 repeats, the first look must not decide; the second (6 repeats, p 0.0002) does."""
    from fwbench.engines.sweep import bisect
    from fwbench_aggregator import loading
    from fwbench_aggregator import sweep as report_sweep

    pattern = [10.0, 10.2, 9.8]
    centre = {"pkg==1.0": 1.0, "pkg==2.0": 1.055}
    levels = []

    def measure(label, n):
        for repeat in range(n):
            value = pattern[repeat % 3] * centre[label]
            rec = record("native-torch", "bert-fit", repeat=repeat, step_ms=[value] * 5, sweep_point=label)
            spec = CellSpec("native-torch", "bert-fit", "tiny", "none", "/d", 5, repeat=repeat, sweep_point=label)
            write_row(rec, target_path(spec, tmp_path, rec))

    def judge(a, b, level=None):
        levels.append(level)
        loaded = loading.load_results([tmp_path])
        return report_sweep.judge(report_sweep.rows_at(loaded, a), report_sweep.rows_at(loaded, b), 5.0,
                                  level or 0.05)[0]

    def median_of(label):
        return 10.0 * centre[label]

    result = bisect(list(centre), measure, judge, median_of, 3, max_repeats=9)
    assert levels and all(level == pytest.approx(0.05 / 3) for level in levels), levels
    assert "at 3 repeats: inconclusive" in result.decisions[0], result.decisions
    assert "at 6 repeats: slower" in result.decisions[1] and result.outcome == "found"


def _fake_judge(changed_at: int, labels: list[str], undecided=()):
    """Verdicts from the truth (slower from labels[changed_at] on), inconclusive for every pair touching `undecided`."""
    from fwbench_aggregator.sweep import StepVerdict

    def judge(a, b, level):
        if a in undecided or b in undecided:
            verdict = "inconclusive"
        else:
            verdict = "slower" if labels.index(a) < changed_at <= labels.index(b) else "equivalent"
        return StepVerdict(None, a, b, 1.2, 1.1, 1.3, verdict, "fake", "", 5.0)

    return judge


def test_a_middle_point_placed_without_a_test_is_marked_in_the_result_the_output_and_the_report(tmp_path, capsys):
    from fwbench.cli.sweep import print_bisect
    from fwbench.engines.sweep import bisect, summary

    labels = [f"pkg==1.{i}" for i in range(5)]
    medians = dict(zip(labels, (10.0, 10.0, 10.4, 12.0, 12.0)))
    # pkg==1.2 stays inconclusive at the cap: its median (10.4) puts it with the good end, without a test.
    result = bisect(labels, lambda label, n: None, _fake_judge(3, labels, undecided=("pkg==1.2",)), medians.get)
    assert result.outcome == "found" and result.untested == ["pkg==1.2"]
    assert result.tested["pkg==1.2"].repeats == 9  # it got every look first
    assert (result.good, result.bad) == ("pkg==1.2", "pkg==1.3")  # with the untested placement
    assert (result.test_good, result.test_bad) == ("pkg==1.0", "pkg==1.3")  # what tests alone support
    lines = summary(result, 5.0)
    assert lines[0].startswith("changed (slower) between pkg==1.0 and pkg==1.3: by tests")
    assert lines[1].startswith("NOT BY A TEST: pkg==1.2") and "between pkg==1.2 and pkg==1.3" in lines[1]
    assert "0.0167" in lines[2]

    out = tmp_path / "out"
    _write(out, "bert-fit", "pkg==1.0", 10.0, 0, np.random.default_rng(0))
    print_bisect(result, out, 5.0)
    printed = " ".join(capsys.readouterr().out.split())
    assert "NOT BY A TEST: pkg==1.2" in printed and "placed with the good end without a test" in printed
    report = (out / "bisect-report" / "bisect.md").read_text()
    assert "NOT BY A TEST: pkg==1.2" in report
    [row] = [line for line in report.splitlines() if line.startswith("| pkg==1.2 |")]
    assert "without a test" in row


def test_a_point_left_out_keeps_the_tested_bracket_in_step():
    from fwbench.engines.sweep import bisect

    labels = [f"pkg==1.{i}" for i in range(5)]
    medians = dict(zip(labels, (10.0, 10.0, None, 12.0, 12.0)))  # pkg==1.2 cannot be measured
    result = bisect(labels, lambda label, n: None, _fake_judge(3, labels), medians.get)
    assert (result.good, result.bad) == (result.test_good, result.test_bad) == ("pkg==1.1", "pkg==1.3")
    assert result.untested == [] and "left out" in result.tested["pkg==1.2"].note
