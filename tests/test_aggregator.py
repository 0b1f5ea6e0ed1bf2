"""`fwbench aggregate`: validation, merging, de-duplication, tables, published comparison, provenance."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.aggregator_rows import CENTRES, record, tree_digest, write, write_matrix
from fwbench.cli.commands import app
from fwbench.core.schema import SCHEMA_VERSION
from fwbench_aggregator import loading, stats
from fwbench_aggregator.aggregate import aggregate
from fwbench_aggregator.summary import speedup_percent

FWBENCH = Path(sys.executable).with_name("fwbench")
FRAMEWORKS = ("torch", "tensorflow", "jax", "keras")


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def matrix_dir(tmp_path_factory) -> Path:
    """Five stacks x two tasks x three repeats, plus an error row and an unsupported cell."""
    out = tmp_path_factory.mktemp("results")
    write_matrix(out, CENTRES)
    write(out, record("keras3-torch", "gemma-fit", status="error",
                      error_message="CUDA out of memory? no: RuntimeError: shapes do not match\nsecond line"))
    write(out, record("keras2-tensorflow", "gemma-fit", status="unsupported",
                      error_message="Keras 2 has no Gemma (NA, as published)"))
    return out


@pytest.fixture(scope="module")
def report(matrix_dir, tmp_path_factory):
    return aggregate([matrix_dir], tmp_path_factory.mktemp("report") / "rep")


# --- the report ------------------------------------------------------------------------------------

def test_report_has_main_table_with_ci_and_keras3_best(report):
    md = report.report_md.read_text()
    assert "| task | keras3-tensorflow [xla] | keras3-jax [xla] | keras3-torch [none] | keras2-tensorflow [xla] " \
           "| native-torch [none] | native-torch [reduce-overhead] | Keras 3 best |" in md
    bert_row = next(line for line in md.splitlines() if line.startswith("| bert-fit |"))
    assert "[" in bert_row and "–" in bert_row  # median [low–high]
    assert "(tensorflow)" in bert_row  # Keras 3 best of bert-fit is the TF backend (21 < 22 ms)
    sam_row = next(line for line in md.splitlines() if line.startswith("| sam-predict |"))
    assert "(jax)" in sam_row
    assert "bootstrap" in md and "95%" in md  # says which CI method


def test_speedups_follow_the_published_formula(report):
    summary = report.summaries[0]
    best = summary.keras3_best("sam-predict")[1].median
    eager = next(e for (t, v), e in summary.estimates.items()
                 if t == "sam-predict" and v.label == "native-torch [none]")
    expected = (eager.median / best - 1) * 100
    assert summary.speedup("sam-predict", ("native-torch", "none")) == pytest.approx(expected)
    assert speedup_percent(1849.80, 418.72) == pytest.approx(341.77, abs=0.01)  # keras.io BERT predict
    md = report.report_md.read_text()
    assert "Keras 3 best vs PyTorch eager" in md and f"{expected:+.0f}%" in md


def test_status_table_lists_errors_and_unsupported(report):
    md = report.report_md.read_text()
    assert "### Status per cell (tiny)" in md
    assert "RuntimeError: shapes do not match" in md and "second line" not in md
    assert "Keras 2 has no Gemma" in md
    gemma_line = next(line for line in md.splitlines() if line.startswith("| gemma-fit |"))
    assert "error" in gemma_line and "unsupported" in gemma_line


def test_a_tiny_cpu_run_is_not_ranked_against_the_published_table(report):
    """Neither a CPU's times nor its ranking at other sizes say anything about the published A100 table."""
    md = report.report_md.read_text()
    assert "Not compared with the published table: preset tiny is not the published sizes" in md
    assert "measured order (fastest first)" not in md and "Kendall tau" not in md


def test_paper_rows_on_a_cpu_are_not_compared_and_on_a_gpu_are_ranked(tmp_path):
    centres = {("native-torch", "none", "bert-fit"): 700.0, ("native-torch", "reduce-overhead", "bert-fit"): 200.0,
               ("keras3-jax", "xla", "bert-fit"): 220.0}
    write_matrix(tmp_path / "gpu", centres, preset="paper", repeats=1, steps=5)
    md = aggregate([tmp_path / "gpu"], tmp_path / "gpu-report").report_md.read_text()
    assert "| bert-fit | native-torch [reduce-overhead] < keras3-jax [xla] < native-torch [none]" in md
    for (stack, mode, task), centre in centres.items():
        write(tmp_path / "cpu", record(stack, task, preset="paper", compile_mode=mode, step_ms=[centre] * 5,
                                       device="cpu"))
    md = aggregate([tmp_path / "cpu"], tmp_path / "cpu-report").report_md.read_text()
    assert "Not compared with the published table: these rows ran on a CPU" in md
    assert "measured / published" not in md


def test_published_comparison_prefers_paper_2024_rows_and_lists_every_difference(tmp_path):
    """Both pin sets measured: only paper-2024 rows face the published table; compiled generate, SD predict and
    Trainer fits say what the published compiled column really ran, generate rows that tokenizing was untimed."""
    import numpy as np

    from tests.aggregator_rows import record, write

    rng = np.random.default_rng(1)
    out = tmp_path / "res"
    cells = [("native-torch", "reduce-overhead", "gemma-generate-bs32", {"compiled_target": "model.forward (inside generate)",
                                                                       "tokenize_in_step": False, "tokens_generated": 44}),
             ("native-torch", "reduce-overhead", "stable_diffusion-predict", {"compiled_target": "UNet"}),
             ("native-torch", "reduce-overhead", "bert-fit", {"compiled_target": "model (Trainer torch_compile)",
                                                            "tf32_matmul": False}),
             ("keras3-jax", "xla", "bert-predict", {"jit_compile": True})]
    for pin_set, centre in (("paper-2024", 100.0), ("current", 50.0)):
        for stack, mode, task, extra in cells:
            rec = record(stack, task, preset="paper", compile_mode=mode, step_ms=rng.normal(centre, 1, 5),
                         pin_set=pin_set, pin_deviations="python 3.11 (published 3.10)" if pin_set != "current" else None,
                         **extra)
            path = write(out / pin_set, rec)
    md = aggregate([out], tmp_path / "rep").report_md.read_text()
    section = re.split(r"\n#+ ", md.split("Published numbers (paper)", 1)[1])[0]
    assert "Compared: rows of the paper-2024 pin set" in section
    table = [line for line in section.splitlines() if line.startswith("| gemma-generate-bs32")
             or line.startswith("| bert-") or line.startswith("| stable_diffusion-predict")]
    assert len(table) == 4 and all("| paper-2024 |" in line for line in table), table
    gemma = next(line for line in table if line.startswith("| gemma-generate-bs32"))
    assert "model.generate ran the uncompiled module; here: model.forward (inside generate) compiled" in gemma
    assert "tokenize/detokenize" in gemma and "pin deviations: python 3.11 (published 3.10)" in gemma
    assert "compiled nothing; here: UNet compiled" in next(line for line in table if "stable_diffusion" in line)
    assert "also switched TF32 on; here TF32 off" in next(line for line in table if line.startswith("| bert-fit"))
    assert "| yes |" in next(line for line in table if line.startswith("| bert-predict"))  # XLA column


def test_published_comparison_says_so_when_only_current_rows_exist(tmp_path):
    write_matrix(tmp_path / "res", {("keras3-jax", "xla", "bert-predict"): 418.72}, preset="paper", repeats=1,
                 spread=0.0, steps=5)
    md = aggregate([tmp_path / "res"], tmp_path / "rep").report_md.read_text()
    assert "no paper-2024 rows: library versions differ from the published run" in md
    assert "library versions of pin set current, not the published ones" in md


def test_paper_preset_shows_measured_over_published(tmp_path):
    write_matrix(tmp_path / "res", {("native-torch", "none", "bert-predict"): 1849.80 * 2,
                                    ("keras3-jax", "xla", "bert-predict"): 418.72},
                 preset="paper", repeats=1, spread=0.0, steps=5)
    md = aggregate([tmp_path / "res"], tmp_path / "rep").report_md.read_text()
    assert "measured / published" in md
    assert "| bert-predict | native-torch [none] |" in md and "2.00x" in md
    assert "Sizes differ" not in md


def test_presets_never_share_a_table(tmp_path):
    write_matrix(tmp_path / "res", {("native-torch", "none", "bert-fit"): 5.0}, preset="tiny", repeats=1)
    write_matrix(tmp_path / "res", {("native-torch", "none", "bert-fit"): 500.0}, preset="paper", repeats=1)
    outcome = aggregate([tmp_path / "res"], tmp_path / "rep")
    assert [s.preset for s in outcome.summaries] == ["paper", "tiny"]
    md = outcome.report_md.read_text()
    assert "## Preset paper" in md and "## Preset tiny" in md
    assert sorted(p.name for p in (tmp_path / "rep").glob("ms_per_step-*.png")) == [
        "ms_per_step-paper.png", "ms_per_step-tiny.png"]


def test_noise_warning_when_cis_overlap(tmp_path):
    write_matrix(tmp_path / "res", {("native-torch", "none", "bert-fit"): 10.0,
                                    ("native-torch", "reduce-overhead", "bert-fit"): 10.05}, spread=0.3)
    md = aggregate([tmp_path / "res"], tmp_path / "rep").report_md.read_text()
    assert "cannot rank" in md


def test_provenance_visible(report):
    md = report.report_md.read_text()
    for needle in ("torch==2.2.1", "transformers==4.38.2", "compile took effect", "graph breaks",
                   "TF32 (setting / matmul / effective)", "default / no / no", "cpu (Test CPU)", "reduce-overhead"):
        assert needle in md, needle


def test_plots_written(report):
    pngs = sorted(p.name for p in report.report_md.parent.glob("*.png"))
    assert pngs == ["ms_per_step-tiny.png", "speedup-tiny.png"]
    assert all((report.report_md.parent / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)


def test_bootstrap_ci_contains_median_and_shrinks_with_more_data():
    rng = np.random.default_rng(1)
    small = stats.estimate([rng.normal(10, 1, 10)])
    large = stats.estimate([rng.normal(10, 1, 100) for _ in range(5)])
    assert small.low <= small.median <= small.high and large.low <= large.median <= large.high
    assert (large.high - large.low) < (small.high - small.low)


# --- merged.parquet ----------------------------------------------------------------------------------

def test_merged_parquet_readable_by_pandas_polars_duckdb(report):
    import duckdb
    import pandas as pd
    import polars as pl

    n = 12 * 3 + 2
    path = report.merged
    assert len(pd.read_parquet(path)) == n
    assert pl.read_parquet(path).height == n
    con = duckdb.connect()
    assert con.execute(f"select count(*) from read_parquet('{path}')").fetchone()[0] == n
    assert con.execute(f"select count(*) from read_parquet('{path}') where status = 'ok'").fetchone()[0] == 36
    assert pd.read_parquet(path)["step_ms"].dropna().map(len).eq(20).all()


# --- malformed inputs ------------------------------------------------------------------------------

def _bad_files(root: Path) -> dict[str, str]:
    """Write one file per kind of damage; returns file name -> expected reason fragment."""
    good = write(root, record("native-torch", "bert-fit", step_ms=[1.0, 2.0, 3.0]))
    (root / "empty.parquet").write_bytes(b"")
    data = good.read_bytes()
    (root / "truncated.parquet").write_bytes(data[: len(data) // 2])
    pq.write_table(pa.table({"a": [1], "b": ["x"]}), root / "foreign.parquet")
    future = pq.read_table(good).set_column(0, pa.field("schema_version", pa.int64()), pa.array([SCHEMA_VERSION + 1]))
    pq.write_table(future.append_column("new_column", pa.array(["x"])), root / "future.parquet")
    (root / "renamed.parquet").write_text("schema_version,stack,task\n1,native-torch,bert-fit\n")
    (root / ".hidden.parquet.1234.tmp").write_bytes(b"half")  # the writer's temp file: silently ignored
    return {"empty.parquet": "empty file", "truncated.parquet": "truncated Parquet",
            "foreign.parquet": "not an fwbench result file: missing columns",
            "future.parquet": f"newer than the supported {SCHEMA_VERSION}", "renamed.parquet": "CSV renamed"}


def test_each_malformed_file_is_skipped_with_one_line(tmp_path):
    expected = _bad_files(tmp_path / "res")
    for name, reason in expected.items():
        outcome = loading.read_result_file(tmp_path / "res" / name)
        assert isinstance(outcome, loading.SkippedFile) and reason in outcome.reason, (name, outcome)


def test_malformed_inputs_end_to_end_without_traceback(tmp_path):
    """Through the real entry point: one line per bad file, exit 0; --strict exits 1; inputs unchanged."""
    res = tmp_path / "res"
    expected = _bad_files(res)
    before = tree_digest(res)
    run = subprocess.run([str(FWBENCH), "aggregate", str(res), "-o", str(tmp_path / "rep")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    for name, reason in expected.items():
        matching = [line for line in lines if name in line]
        assert len(matching) == 1 and reason in matching[0], (name, lines)
    assert "Traceback" not in run.stderr + run.stdout and ".hidden" not in run.stderr
    assert "Skipped files" in (tmp_path / "rep" / "report.md").read_text()
    strict = subprocess.run([str(FWBENCH), "aggregate", str(res), "-o", str(tmp_path / "rep2"), "--strict"],
                            capture_output=True, text=True, timeout=60)
    assert strict.returncode == 1 and "Traceback" not in strict.stderr
    assert "--strict" in strict.stderr.splitlines()[-1] and not (tmp_path / "rep2").exists()
    assert tree_digest(res) == before


def test_dir_without_results_and_missing_path(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no results here")
    result = cli("aggregate", str(tmp_path / "empty"), "-o", str(tmp_path / "rep"))
    assert result.exit_code == 1
    assert "no result files (*.parquet) found" in result.output
    missing = cli("aggregate", str(tmp_path / "nope"), "-o", str(tmp_path / "rep"))
    assert missing.exit_code == 2 and "no such file or directory" in missing.output
    only_bad = tmp_path / "bad"
    only_bad.mkdir()
    (only_bad / "x.parquet").write_bytes(b"")
    result = cli("aggregate", str(only_bad), "-o", str(tmp_path / "rep"))
    assert result.exit_code == 1 and "none of the 1 result files" in result.output


def test_report_dir_inside_results_is_refused(matrix_dir):
    before = tree_digest(matrix_dir)
    result = cli("aggregate", str(matrix_dir), "-o", str(matrix_dir / "report"))
    assert result.exit_code == 2 and "inside results dir" in result.output
    assert tree_digest(matrix_dir) == before


# --- de-duplication ------------------------------------------------------------------------------------

def test_duplicates_are_merged_and_reported(tmp_path):
    import datetime as dt

    first = write(tmp_path / "a", record("native-torch", "bert-fit", step_ms=[5.0] * 5, record_id="same"))
    (tmp_path / "copy").mkdir()
    shutil.copy(first, tmp_path / "copy" / "again.parquet")  # same record_id twice
    newer = dt.datetime(2026, 2, 1, tzinfo=dt.timezone.utc)
    write(tmp_path / "b", record("native-torch", "bert-fit", step_ms=[7.0] * 5, started_at=newer))
    loaded = loading.load_results([tmp_path / "a", tmp_path / "copy", tmp_path / "b"])
    assert loaded.table.num_rows == 1
    assert loaded.table.column("ms_per_step").to_pylist() == [7.0]  # newest started_at wins
    assert any("duplicate record same" in n for n in loaded.notes)
    assert any("appears more than once: kept the newest" in n for n in loaded.notes)


# --- no deep-learning framework, ever --------------------------------------------------------------------

def test_aggregate_never_imports_a_framework(matrix_dir, tmp_path):
    code = textwrap.dedent(f"""
        import sys
        from fwbench.cli.commands import app
        from fwbench_aggregator.cli import run_aggregate
        from pathlib import Path
        run_aggregate([Path({str(matrix_dir)!r})], Path({str(tmp_path / 'rep')!r}))
        loaded = sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r})
        print('FRAMEWORKS:', loaded)
        sys.exit(1 if loaded else 0)
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "FRAMEWORKS: []" in run.stdout


# --- real harness output ------------------------------------------------------------------------------------

@pytest.mark.integration
def test_real_harness_output(tmp_path):
    """Rows written by a real native-torch cell (local engine; its environment is built if missing)."""
    built = subprocess.run([str(FWBENCH), "env", "build", "native-torch"], capture_output=True, text=True,
                           timeout=1800)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    out = tmp_path / "res"
    env = dict(os.environ, FWBENCH_DATA=str(tmp_path / "data"))
    run = subprocess.run([str(FWBENCH), "run", "--engine", "local", "--stack", "native-torch",
                          "--task", "bert-predict", "--preset", "tiny", "--repeats", "2", "--warmup", "1",
                          "--steps", "3", "--threads", "1", "--out", str(out)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    before = tree_digest(out)
    # CI builds images beside the tests, so these rows may well be busy: include them to test the numbers.
    outcome = aggregate([out], tmp_path / "rep", include_busy=True)
    md = outcome.report_md.read_text()
    assert "| bert-predict |" in md and "native-torch [none]" in md
    assert outcome.summaries[0].estimates  # real step_ms made it into an estimate
    assert tree_digest(out) == before
