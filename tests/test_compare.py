"""`fwbench compare A B`: ratios with intervals, Welch's test over repeats with Holm correction, --fail-above."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fwbench.cli import app
from fwbench_aggregator import compare as cmp
from fwbench_aggregator import loading
from tests.aggregator_rows import CENTRES, record, write, write_matrix

SLOWED = ("keras3-jax", "xla", "sam-predict")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs of the same synthetic distribution (different seeds); B has one cell 30% slower."""
    root = tmp_path_factory.mktemp("compare")
    write_matrix(root / "a", CENTRES, seed=1)
    write_matrix(root / "b", CENTRES, seed=2, slow={SLOWED: 1.3})
    return root / "a", root / "b"


def test_same_distribution_not_significant_and_slowed_cell_flagged(runs):
    rows = cmp.compare(loading.load_results([runs[0]]), loading.load_results([runs[1]]))
    assert len(rows) == len(CENTRES)
    slowed = [r for r in rows if (r.variant.stack, r.variant.compile_mode, r.task) == SLOWED]
    assert slowed[0].verdict == "slower" and slowed[0].change_pct == pytest.approx(30, abs=6)
    others = [r for r in rows if r not in slowed]
    not_significant = [r for r in others if r.verdict.startswith("not significant")]
    assert len(not_significant) >= len(others) - 1, [(r.task, r.variant.label, r.verdict) for r in others]


def test_cli_fail_above(runs):
    a, b = map(str, runs)
    strict = CliRunner().invoke(app, ["compare", a, b, "--fail-above", "10"])
    assert strict.exit_code == 1, strict.output
    assert "not significant" in strict.output and "slower" in strict.output
    assert "regression above 10%" in strict.output
    lenient = CliRunner().invoke(app, ["compare", a, b, "--fail-above", "50"])
    assert lenient.exit_code == 0, lenient.output
    plain = CliRunner().invoke(app, ["compare", a, a])
    assert plain.exit_code == 0 and "slower" not in plain.output


def test_cells_missing_on_one_side(tmp_path):
    write(tmp_path / "a", record("native-torch", "bert-fit", step_ms=[5.0, 5.1, 4.9]))
    write(tmp_path / "b", record("native-torch", "sam-fit", step_ms=[5.0, 5.1, 4.9]))
    rows = cmp.compare(loading.load_results([tmp_path / "a"]), loading.load_results([tmp_path / "b"]))
    assert sorted(r.verdict for r in rows) == ["only in A", "only in B"]


def test_compare_user_errors(tmp_path):
    missing = CliRunner().invoke(app, ["compare", str(tmp_path / "x"), str(tmp_path / "y")])
    assert missing.exit_code == 2 and "no such file or directory" in missing.output
    (tmp_path / "empty").mkdir()
    empty = CliRunner().invoke(app, ["compare", str(tmp_path / "empty"), str(tmp_path / "empty")])
    assert empty.exit_code == 1 and "no result files" in empty.output


def test_holm_adjustment():
    assert cmp.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert cmp.holm([]) == []


def test_compare_through_real_entry_point_has_no_traceback(runs):
    fwbench = Path(sys.executable).with_name("fwbench")
    run = subprocess.run([str(fwbench), "compare", str(runs[0]), str(runs[1]), "--fail-above", "10"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "regression above 10%: sam-predict keras3-jax [xla]" in run.stderr


@pytest.mark.integration
def test_compare_flags_a_real_cell_slowed_on_purpose(tmp_path, shared_data):
    """Real native-torch cells: run B adds a delay to every timed step of one task (the hidden
    --inject-fault step-sleep), and compare's --fail-above gate must fail on that cell.

    Load-proof: the delay is planted after run A's cell was measured, at three times A's slowest step
    (and at least 1 s). Every step of B then takes longer than 3x every step of A, whatever load either
    run met (load only slows B further), so any resampled ratio of medians is above 3 (a fixed 1 s once
    failed when load made A's own steps ~0.7 s)."""
    from fwbench import results
    from tests.conftest import run_fwbench

    built = run_fwbench("env", "build", "native-torch")  # reused if already built
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    common = ["run", "--stack", "native-torch", "--preset", "tiny", "--steps", "8", "--data", str(shared_data)]
    for out in ("a", "b"):
        done = run_fwbench(*common, "--task", "bert-predict", "--out", str(tmp_path / out))
        assert done.returncode == 0, done.stdout[-2000:]
    done = run_fwbench(*common, "--task", "sam-predict", "--out", str(tmp_path / "a"))
    assert done.returncode == 0, done.stdout[-2000:]
    (row_a,) = [results.read_row(p) for p in (tmp_path / "a").rglob("sam-predict*.parquet")]
    delay_ms = max(1000, round(3 * max(row_a["step_ms"])))
    done = run_fwbench(*common, "--task", "sam-predict", "--out", str(tmp_path / "b"),
                       "--inject-fault", f"step-sleep:{delay_ms}")
    assert done.returncode == 0, done.stdout[-2000:]
    rows = cmp.compare(loading.load_results([tmp_path / "a"]), loading.load_results([tmp_path / "b"]))
    slowed = next(r for r in rows if r.task == "sam-predict")
    # One repeat a side: no significance claimed, but the interval is beyond 3x, far beyond +50%.
    assert slowed.verdict.startswith("not testable") and slowed.ratio_low > 2.9, (slowed.verdict, slowed.ratio_low)
    compared = run_fwbench("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--fail-above", "50")
    assert compared.returncode == 1 and "Traceback" not in compared.stdout + compared.stderr
    assert "regression above 50%: sam-predict native-torch [none]" in compared.stderr
