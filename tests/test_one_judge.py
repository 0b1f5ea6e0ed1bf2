"""One judge (issue 49): every case the issue lists under "Why" for ties, busy rows, pooling and axes, on rows written
by the project's own row writer; each failed on the code before fwbench_aggregator.judge."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from fwbench.cli.commands import app
from fwbench_aggregator import compare as cmp
from fwbench_aggregator import judge, loading, model_files
from fwbench_aggregator.aggregate import aggregate
from tests.aggregator_rows import LIBRARY_VERSIONS, record, write

SHA = "c" * 64
MODEL_TASK = "my_model.py-fit-bs4"


def rows_at(out, stack, task, step_ms, *, repeats=1, first_repeat=0, **extra):
    for repeat in range(first_repeat, first_repeat + repeats):
        write(out, record(stack, task, repeat=repeat, step_ms=step_ms, **extra))
    return out


def best_cell(md: str, task: str) -> str:
    table = md.split("| task | keras3", 1)[1]
    return next(line for line in table.splitlines() if line.startswith(f"| {task} |")).split("|")[-2].strip()


# --- ties -------------------------------------------------------------------------------------------------------

def test_two_cells_at_exactly_the_same_time_have_no_winner_and_a_warning(tmp_path):
    out = tmp_path / "res"
    rows_at(out, "keras3-jax", "bert-fit", [44.0] * 20)
    rows_at(out, "keras3-torch", "bert-fit", [44.0] * 20)
    outcome = aggregate([out], tmp_path / "rep")
    md = outcome.report_md.read_text()
    best = best_cell(md, "bert-fit")
    assert best.startswith(("tie: ", "cannot rank: ")) and "(jax)" in best and "(torch)" in best
    assert "bert-fit: cannot rank keras3-jax [xla] (44 ms" in md  # the noise warning names the pair
    ranking = outcome.summaries[0].keras3_ranking("bert-fit")
    assert ranking.winner is None


def test_a_narrow_interval_inside_a_wide_one_names_no_winner(tmp_path):
    """19.02 [12.07-25.95] vs 19.91 [19.85-19.96]: the overlap rule (Cumming & Finch) named a winner."""
    rng = np.random.default_rng(3)
    out = tmp_path / "res"
    for repeat, centre in enumerate((12.5, 19.0, 25.5)):
        rows_at(out, "keras3-jax", "bert-fit", centre * np.exp(rng.normal(0, 0.01, 20)), first_repeat=repeat)
    for repeat in range(3):
        rows_at(out, "keras3-torch", "bert-fit", 19.91 * np.exp(rng.normal(0, 0.002, 20)), first_repeat=repeat)
    md = aggregate([out], tmp_path / "rep").report_md.read_text()
    best = best_cell(md, "bert-fit")
    assert best.startswith("cannot rank: ") and "faster than" not in best
    assert "cannot rank keras3-jax [xla]" in md


def test_a_winner_carries_its_ratio_and_interval(tmp_path):
    out = tmp_path / "res"
    for repeat in range(3):
        rows_at(out, "keras3-jax", "bert-fit", [10.0 + 0.1 * repeat] * 20, first_repeat=repeat)
        rows_at(out, "keras3-torch", "bert-fit", [20.0 + 0.1 * repeat] * 20, first_repeat=repeat)
    best = best_cell(aggregate([out], tmp_path / "rep").report_md.read_text(), "bert-fit")
    assert best.startswith("10.1 (jax), x1.99 [") and best.endswith("] faster than torch")


def test_the_speed_up_table_says_what_the_judge_can_say_of_each_speed_up(tmp_path):
    """'+10%' over PyTorch eager from one process a side read as a finding; the judge cannot rank it."""
    out = tmp_path / "res"
    rows_at(out, "keras3-jax", "bert-fit", [40.0, 40.4] * 10)
    rows_at(out, "native-torch", "bert-fit", [44.0, 44.4] * 10)
    rows_at(out, "keras3-jax", "bert-predict", [10.0, 10.1] * 10)
    rows_at(out, "native-torch", "bert-predict", [30.0, 30.3] * 10)
    md = aggregate([out], tmp_path / "rep").report_md.read_text()
    table = md.split("| task | Keras 3 best vs PyTorch eager", 1)[1].split("\n\n", 1)[0]
    fit = next(line for line in table.splitlines() if line.startswith("| bert-fit |"))
    predict = next(line for line in table.splitlines() if line.startswith("| bert-predict |"))
    assert "+10% (cannot rank)" in fit
    assert "+200% (faster)" in predict


def test_your_models_names_no_fastest_where_the_ratio_interval_reaches_across_1(tmp_path):
    """'Fastest: keras3-jax x1.05 [0.66-1.99] faster than the next' with no 'cannot rank'."""
    out = tmp_path / "res"
    rng = np.random.default_rng(1)
    for stack, centre, spread in (("keras3-jax", 10.0, 0.3), ("keras3-torch", 10.5, 0.3)):
        write(out, record(stack, MODEL_TASK, step_ms=centre * np.exp(rng.normal(0, spread, 20)), model_sha256=SHA,
                          model_file="/x/my_model.py"))
    (table,) = model_files.tables(loading.load_results([out]).frame())
    verdict = model_files.verdict(table)
    assert verdict.startswith("Cannot rank: ") and "Fastest" not in verdict and "reaches across 1" in verdict


def test_the_published_order_uses_ranked_pairs_only(tmp_path):
    """native eager 566.9 vs reduce-overhead 568.9 ms (H100 bert-predict): 'same order: no' from a pair the same
    report could not rank."""
    from fwbench_aggregator import published
    from fwbench_aggregator.summary import summarise

    out = tmp_path / "res"
    rng = np.random.default_rng(2)
    for mode, centre in (("none", 566.9), ("reduce-overhead", 568.9)):
        write(out, record("native-torch", "bert-predict", preset="paper", compile_mode=mode,
                          step_ms=centre * np.exp(rng.normal(0, 0.003, 20))))
    (summary,) = summarise(loading.load_results([out]).frame())
    (row,) = published.rankings(summary, published.load_published())
    assert row.ranked_pairs == () and row.same is None and row.same_text().startswith("cannot rank")
    assert row.kendall_tau is None


# --- busy rows --------------------------------------------------------------------------------------------------

def _busy_compare(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    rows_at(a, "native-torch", "bert-fit", [10.0, 10.1, 10.2] * 7, repeats=3)
    rows_at(b, "native-torch", "bert-fit", [13.6, 13.7, 13.8] * 7, repeats=3, busy=True,
            busy_reasons="other processes used 1.5 CPU cores")
    return a, b


def test_compare_with_one_side_all_busy_is_not_judged_and_has_an_exit_code_of_its_own(tmp_path):
    a, b = _busy_compare(tmp_path)
    (row,) = cmp.compare(loading.load_results([a]), loading.load_results([b]))
    assert row.verdict.startswith(judge.NOT_JUDGED_BUSY) and "slower" not in row.verdict
    gated = CliRunner().invoke(app, ["compare", str(a), str(b), "--fail-above", "5"])
    assert gated.exit_code == 3, gated.output
    assert "regression" not in gated.output and "not judged" in gated.output


def test_sweep_steps_are_not_judged_from_busy_rows(tmp_path):
    from fwbench_aggregator import sweep

    a, b = tmp_path / "a", tmp_path / "b"
    rows_at(a, "native-torch", "bert-fit", [10.0, 10.1, 10.2] * 7, repeats=3, sweep_point="torch==2.2.1")
    rows_at(b, "native-torch", "bert-fit", [13.6, 13.7, 13.8] * 7, repeats=3, sweep_point="torch==2.3.0",
            busy=True)
    (step,) = sweep.judge(loading.load_results([a]), loading.load_results([b]))
    assert step.verdict == sweep.INCONCLUSIVE and not step.changed and "busy" in step.detail


# --- pooling ----------------------------------------------------------------------------------------------------

def test_repeats_with_different_library_versions_are_split_not_pooled(tmp_path):
    out = tmp_path / "res"
    rows_at(out, "keras3-jax", "bert-fit", [10.0] * 20, repeats=2,
            library_versions={**LIBRARY_VERSIONS, "keras": "3.15.1"})
    rows_at(out, "keras3-jax", "bert-fit", [30.0] * 20, first_repeat=2,
            library_versions={**LIBRARY_VERSIONS, "keras": "3.16.0"})
    outcome = aggregate([out], tmp_path / "rep")
    labels = sorted(v.label for v in outcome.summaries[0].variants)
    assert labels == ["keras3-jax [xla] (keras 3.15.1)", "keras3-jax [xla] (keras 3.16.0)"]
    (a_side,) = cmp.cell_sides(__import__("fwbench_aggregator.variants", fromlist=["x"]).assign_variants(
        loading.load_results([out]).frame())).values()
    assert "keras 3.15.1: 2 row(s)" in a_side[1].mixed  # compare refuses to pool them too


def test_your_models_keeps_jit_settings_apart(tmp_path):
    """'--jit published' (10 ms) and 'on' (30 ms) were one 'keras3-jax (XLA) 18.96 [10.02-30.04]'."""
    out = tmp_path / "res"
    for jit, centre in (("published", 10.0), ("on", 30.0)):
        for repeat in range(2):
            write(out / jit, record("keras3-jax", MODEL_TASK, repeat=repeat, step_ms=[centre] * 20, model_sha256=SHA,
                                    model_file="/x/my_model.py", jit_policy=jit, jit_compile=True))
    (table,) = model_files.tables(loading.load_results([out]).frame())
    labels = sorted(b.label for b in table.backends)
    assert labels == ["keras3-jax (XLA, jit=on)", "keras3-jax (XLA, jit=published)"]
    assert sorted(b.estimate.median for b in table.backends) == [10.0, 30.0]


def test_your_models_tables_of_another_device_count_say_so_in_their_title(tmp_path):
    out = tmp_path / "res"
    for devices in (1, 2):
        write(out / str(devices), record("keras3-jax", MODEL_TASK, step_ms=[10.0 * devices] * 20, model_sha256=SHA,
                                         model_file="/x/my_model.py", devices=devices))
    titles = sorted(t.title_settings for t in model_files.tables(loading.load_results([out]).frame()))
    assert titles == ["devices=1", "devices=2"]


# --- axes -------------------------------------------------------------------------------------------------------

def test_compare_across_global_batch_judges_per_sample_not_as_a_regression(tmp_path):
    """B runs a 4x global batch at 3.63x the step time: 'slower +262.9%' and exit 1 before; per sample it is
    1.10x faster."""
    a, b = tmp_path / "a", tmp_path / "b"
    for repeat in range(3):
        rows_at(a, "native-torch", "bert-fit", [10.0 + 0.05 * repeat] * 20, first_repeat=repeat,
                global_batch=8, global_batch_setting=8)
        rows_at(b, "native-torch", "bert-fit", [36.3 + 0.2 * repeat] * 20, first_repeat=repeat,
                global_batch=32, global_batch_setting=32)
    rows = cmp.compare(loading.load_results([a]), loading.load_results([b]), across=["global_batch"])
    (row,) = [r for r in rows if r.paired]
    assert row.ratio == pytest.approx(36.4 / 4 / 10.05, rel=0.01) and row.verdict == "faster per sample"
    gated = CliRunner().invoke(app, ["compare", str(a), str(b), "--across", "global_batch", "--fail-above", "5"])
    assert gated.exit_code == 0, gated.output


# --- the judge's own rule ---------------------------------------------------------------------------------------

def test_one_process_a_side_separates_only_cells_far_apart():
    a = [np.full(20, 10.0) * np.exp(np.linspace(-0.01, 0.01, 20))]
    assert judge.ratio(a, [x * 1.3 for x in a]).word == judge.CANNOT_RANK  # 1.3x: a process could do that
    assert judge.ratio(a, [x * 2.0 for x in a]).word == judge.FASTER
    three = [r * (1 + 0.01 * k) for k, r in enumerate(a * 3)]
    assert judge.ratio(three, [x * 1.3 for x in three]).word == judge.FASTER  # the repeats show their spread
    assert judge.ratio(three, [x * 1.01 for x in three]).word == judge.TIE


def test_the_docs_table_of_the_rankings_error_rates_is_made_from_its_result_file():
    """docs/aggregator.md's table is benchmarks/verdict_error_rates.py's rendering of the committed JSON file."""
    import importlib.util
    import json
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("verdict_error_rates", root / "benchmarks" / "verdict_error_rates.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    files = sorted((root / "benchmarks" / "results").glob("*/verdict-rank.json"))
    assert files, "no verdict-rank.json under benchmarks/results"
    record_ = json.loads(files[-1].read_text())
    assert module.rank_table(record_) in (root / "docs" / "aggregator.md").read_text()
    assert all(row["target_met"] for row in record_["rows"])
    assert all(row["false_order"] <= 0.06 and row["wrong_winner"] <= 0.06 for row in record_["rows"])


def test_repeats_of_two_compile_cache_states_are_split_not_pooled(tmp_path):
    """A keras3-jax cell whose first repeat compiled (cache cold) and the others loaded (warm): two parts."""
    out = tmp_path / "res"
    rows_at(out, "keras3-jax", "bert-fit", [10.0] * 20, compile_cache_warm=False)
    rows_at(out, "keras3-jax", "bert-fit", [10.4] * 20, repeats=2, first_repeat=1, compile_cache_warm=True)
    labels = sorted(v.label for v in aggregate([out], tmp_path / "rep").summaries[0].variants)
    assert labels == ["keras3-jax [xla] (compile cache cold)", "keras3-jax [xla] (compile cache warm)"]


def test_your_models_with_only_busy_rows_says_so_with_or_without_include_busy(tmp_path):
    """With --include-busy the busy rows' numbers are shown, but still rank nothing: the sentence said 'No backend
    ran ok.' of backends that had run ok (seen in CI)."""
    out = tmp_path / "res"
    for stack in ("keras3-jax", "keras3-torch"):
        write(out, record(stack, MODEL_TASK, step_ms=[10.0] * 20, model_sha256=SHA, model_file="/x/my_model.py",
                          busy=True))
    frame = loading.load_results([out]).frame()
    for include_busy in (False, True):
        (table,) = model_files.tables(frame, include_busy)
        assert model_files.verdict(table).startswith("No backend ran ok on a quiet machine"), include_busy
        assert all(b.estimate is not None for b in table.backends) and not table.ranked
