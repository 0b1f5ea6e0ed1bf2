"""`fwbench bisect`: it judges only the cell it was asked about, spends alpha over its repeated looks, places each
middle point by its test against the good end alone (never by the bad end, never without a test), and words an
outcome from intervals. The cell runner, or judge and measure, are replaced by stand-ins."""

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
    captured = capsys.readouterr()
    return done.value.code, captured.out + captured.err


def test_releases_this_python_cannot_install_are_not_searched_and_are_named(tmp_path, monkeypatch, capsys):
    """The index (the boundary: a stand-in page) lists 1.1 for Python >= 3.99 only: the search never measures it (a
    point there could only be an error row), the output and bisect.md name it, and an end this Python cannot install
    is a one-line error before anything runs. Before, 1.1 was a candidate like the others."""
    from fwbench.core import sweep as points

    page = {"files": [{"filename": f"tqdm-{v}-py3-none-any.whl", "requires-python": spec}
                      for v, spec in (("1.0", ">=3.8"), ("1.1", ">=3.99"), ("1.2", None), ("1.3", None),
                                      ("1.4", ">=3.99"))]}
    monkeypatch.setattr(points, "fetch_simple_json", lambda package, *a, **k: page)
    out = tmp_path / "bisect"
    code, printed = _run_bisect(monkeypatch, capsys, out, lambda label: 13.0 if label >= "tqdm==1.3" else 10.0,
                                ["--package", "tqdm", "--good", "1.0", "--bad", "1.3"])
    printed = " ".join(printed.split())
    assert code == 0, printed
    assert "3 candidate points from tqdm==1.0 to tqdm==1.3" in printed
    assert "tqdm==1.1" not in printed.replace("1 release(s) left out", "")
    assert "1 release(s) left out that Python" in printed and "the newest 1.1 (requires-python >=3.99)" in printed
    assert "changed (slower) between tqdm==1.2 and tqdm==1.3" in printed, printed
    report = " ".join((out / "bisect-report" / "bisect.md").read_text().split())
    assert "Not searched: 1 release(s) left out" in report and "tqdm==1.1 |" not in report
    calls = []
    code, said = _run_bisect(monkeypatch, capsys, tmp_path / "other", lambda label: calls.append(label) or 10.0,
                             ["--package", "tqdm", "--good", "1.0", "--bad", "1.4"])
    assert code == 2 and calls == []
    assert said.strip().startswith("error: --bad 1.4: Python") and "requires-python >=3.99" in said
    assert len(said.strip().splitlines()) == 1 and not (tmp_path / "other").exists()


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
    from fwbench_aggregator.bisect import bisect_looks, look_level

    assert bisect_looks(3, 9) == [3, 6, 9] and bisect_looks(5, 9) == [5, 8, 9] and bisect_looks(3, 3) == [3]
    assert look_level(0.05, [3, 6, 9]) == pytest.approx(0.05 / 3) and look_level(0.05, [9]) == 0.05


def test_the_end_check_judges_every_look_at_alpha_over_the_looks(tmp_path):
    """Ends whose 3 repeats differ by x1.055 at two-sided p 0.031: "slower" at 5%, not at 5%/3. With looks at 3,
    6 and 9 repeats, the first look must not decide; the second (6 repeats, p 0.0002) does."""
    from fwbench_aggregator.bisect import bisect
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

    shapes = {"slower": (1.2, 1.1, 1.3), "equivalent": (1.0, 0.98, 1.02), "inconclusive": (1.04, 0.97, 1.12)}

    def judge(a, b, level):
        if a in undecided or b in undecided:
            verdict = "inconclusive"
        else:
            verdict = "slower" if labels.index(a) < changed_at <= labels.index(b) else "equivalent"
        return StepVerdict(None, a, b, *shapes[verdict], verdict, "fake", "", 5.0)

    return judge


def _scripted(script):
    """A stand-in measure and judge. script[(a, b)]: (repeats, verdict, ratio, low, high) entries; judge(a, b) gives
    the last entry whose repeats both points have. Returns measure, judge and the judgements asked for."""
    from fwbench_aggregator.sweep import StepVerdict

    repeats: dict[str, int] = {}
    asked: list[tuple[str, str, int]] = []

    def measure(label, n):
        repeats[label] = n

    def judge(a, b, level):
        n = min(repeats[a], repeats[b])
        asked.append((a, b, n))
        _, verdict, ratio, low, high = [entry for entry in script[(a, b)] if entry[0] <= n][-1]
        return StepVerdict(None, a, b, ratio, low, high, verdict, "stand-in", "", 5.0)

    return measure, judge, asked


def test_a_point_past_the_tolerance_against_the_good_end_is_on_the_bad_side_whatever_the_bad_end_does():
    """Two steps: +8% from pkg==1.1 on, +15% more from pkg==1.3 on. The middle point pkg==1.2 is x1.077
    [1.019–1.139] against the good end (significant at 0.05 / 3 from 6 repeats) and the bad end is slower still.
    It is on the bad side: the search goes on below it and finds the first step, then reports the second."""
    from fwbench_aggregator.bisect import bisect, summary

    good, first, middle, second, bad = labels = [f"pkg==1.{i}" for i in range(5)]
    measure, judge, asked = _scripted({
        (good, bad): [(3, "slower", 1.242, 1.200, 1.290)],
        (good, middle): [(3, "inconclusive", 1.077, 1.019, 1.139), (6, "slower", 1.077, 1.019, 1.139)],
        (middle, bad): [(3, "slower", 1.153, 1.100, 1.210)],
        (good, first): [(3, "slower", 1.080, 1.030, 1.130)],
        (first, bad): [(3, "slower", 1.150, 1.100, 1.200)],
        (good, second): [(3, "slower", 1.242, 1.200, 1.290)],
        (second, bad): [(3, "equivalent", 1.000, 0.970, 1.030)],
    })
    result = bisect(labels, measure, judge, lambda label: 10.0)
    assert result.outcome == "found" and (result.good, result.bad) == (good, first), result.decisions
    # Placed by its test against the good end alone: the bad end is judged against the found point afterwards.
    assert (middle, bad) not in [(a, b) for a, b, _ in asked]
    [placed] = [line for line in result.decisions if line.startswith(f"{middle} at 6 repeats")]
    assert "bad side" in placed and "x1.077 [1.019–1.139]" in placed
    lines = summary(result, 5.0)
    assert lines[0].startswith(f"changed (slower) between {good} and {first}:"), lines
    assert any(line.startswith(f"and again (slower) between {first} and {bad}:") for line in lines), lines


def test_a_point_inconclusive_at_the_cap_leaves_the_first_change_undecided(tmp_path, capsys):
    """pkg==1.2 stays inconclusive against the good end at every look (x1.040 [0.970–1.120] at 9 repeats): no
    placement without a test. The search stops; the outcome names the bracket the tests support, the two ends,
    and says it is undecided in between (neither pkg==1.1 nor pkg==1.3 is tested)."""
    from fwbench.cli.sweep import print_bisect
    from fwbench_aggregator.bisect import bisect, summary

    good, before, middle, after, bad = labels = [f"pkg==1.{i}" for i in range(5)]
    measure, judge, _ = _scripted({
        (good, bad): [(3, "slower", 1.200, 1.150, 1.250)],
        (good, middle): [(3, "inconclusive", 1.040, 0.970, 1.120)],
        (middle, bad): [(3, "inconclusive", 1.150, 0.990, 1.330)],
        (good, before): [(3, "equivalent", 1.000, 0.980, 1.020)],
        (before, bad): [(3, "slower", 1.200, 1.150, 1.250)],
        (good, after): [(3, "slower", 1.200, 1.150, 1.250)],
        (after, bad): [(3, "equivalent", 1.000, 0.970, 1.030)],
    })
    medians = dict(zip(labels, (10.0, 10.0, 10.4, 12.0, 12.0)))  # pkg==1.2's median is nearer the good end's
    result = bisect(labels, measure, judge, medians.get)
    assert result.outcome == "undecided" and result.undecided == [middle], result.decisions
    assert (result.good, result.bad) == (good, bad) and list(result.tested) == [good, bad, middle]
    assert result.tested[middle].repeats == 9  # it got every look first
    lines = summary(result, 5.0)
    assert lines[0].startswith(f"first change (slower) between {good} and {bad}, undecided in between: {middle}")
    assert "x1.040 [0.970–1.120]" in lines[0] and "between 3.0% faster and 12.0% slower" in lines[0]
    assert lines[0].endswith(f"not tested: {before}, {after}")
    text = " ".join(lines)
    assert "changed (slower) between" not in text and f"and {middle}" not in text and f"{middle} and" not in text

    out = tmp_path / "out"
    _write(out, "bert-fit", good, 10.0, 0, np.random.default_rng(0))
    print_bisect(result, out, 5.0)
    printed = " ".join(capsys.readouterr().out.split())
    assert f"first change (slower) between {good} and {bad}, undecided in between" in printed
    report = (out / "bisect-report" / "bisect.md").read_text()
    assert "undecided in between" in report
    [row] = [line for line in report.splitlines() if line.startswith(f"| {middle} |")]
    assert "undecided" in row


@pytest.mark.parametrize("direction, ratio, low, high, supported, beyond", [
    ("slower", 1.077, 1.019, 1.139, "slower by 1.9–13.9%", False),
    ("slower", 1.120, 1.060, 1.190, "slower by 6.0–19.0%", True),
    ("faster", 0.860, 0.830, 0.940, "faster by 6.0–17.0%", True),
])
def test_the_outcome_says_what_the_interval_supports(direction, ratio, low, high, supported, beyond):
    """"slower" needs p < alpha and a point estimate beyond the tolerance: the outcome gives the interval and what it
    supports, and says "more than 5%" only when the whole interval is beyond it."""
    from fwbench_aggregator.bisect import bisect, summary

    good, middle, bad = labels = ["pkg==1.0", "pkg==1.1", "pkg==1.2"]
    measure, judge, _ = _scripted({
        (good, bad): [(3, direction, ratio, low, high)],
        (good, middle): [(3, "equivalent", 1.000, 0.980, 1.020)],
        (middle, bad): [(3, direction, ratio, low, high)],
    })
    result = bisect(labels, measure, judge, lambda label: 10.0)
    first = summary(result, 5.0)[0]
    assert first.startswith(f"changed ({direction}) between {middle} and {bad}:"), first
    assert f"x{ratio:.3f} [{low:.3f}–{high:.3f}]" in first and supported in first, first
    assert ("more than 5%" in first) == beyond, first


def test_a_point_left_out_keeps_the_bracket_in_step():
    from fwbench_aggregator.bisect import bisect

    labels = [f"pkg==1.{i}" for i in range(5)]
    medians = dict(zip(labels, (10.0, 10.0, None, 12.0, 12.0)))  # pkg==1.2 cannot be measured
    result = bisect(labels, lambda label, n: None, _fake_judge(3, labels), medians.get)
    assert result.outcome == "found" and (result.good, result.bad) == ("pkg==1.1", "pkg==1.3")
    assert result.undecided == [] and "left out" in result.tested["pkg==1.2"].note
