"""Cell identity in the aggregator and compare: rows of different settings are never pooled or paired,
and untrusted row content never names a file."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from fwbench.cli.commands import app
from fwbench.core import results
from fwbench.core.identity import CellIdentity
from fwbench_aggregator import compare as cmp
from fwbench_aggregator import loading
from fwbench_aggregator.aggregate import aggregate
from fwbench_aggregator.report import fmt_ms
from fwbench_aggregator.summary import SPEEDUP_BASELINES
from tests.aggregator_rows import record, tree_digest, write

FWBENCH = Path(sys.executable).with_name("fwbench")
STEPS = [5.0, 5.2, 4.9, 5.1, 5.0]


def write_named(out: Path, rec: dict, name: str) -> Path:
    """A row under its own file name (two identities must not share one)."""
    from fwbench.core.results import write_row

    return write_row(rec, Path(out) / rec["preset"] / rec["stack"] / name)


def main_table_headers(md: str) -> list[str]:
    header = next(line for line in md.splitlines() if line.startswith("| task |"))
    return [cell.strip() for cell in header.strip("|").split("|")]


@pytest.mark.parametrize("setting, values, labels", [
    # Each precision has a table of its own, titled by it: the columns need not name it.
    ("precision", ("published", "bf16"), ("native-torch [none]", "native-torch [none]")),
    ("threads", (1, 2), ("native-torch [none, threads=1]", "native-torch [none, threads=2]")),
    ("timed_steps", (5, 100), ("native-torch [none, steps=5]", "native-torch [none, steps=100]")),
    ("device_model", ("CPU A", "GPU B"), ("native-torch [none, device=CPU A]", "native-torch [none, device=GPU B]")),
])
def test_rows_of_different_settings_are_separate_variants(tmp_path, setting, values, labels):
    for i, value in enumerate(values):
        write_named(tmp_path / "res", record("native-torch", "bert-fit", step_ms=STEPS, **{setting: value}), f"{i}.parquet")
    outcome = aggregate([tmp_path / "res"], tmp_path / "rep")
    assert outcome.loaded.table.num_rows == 2 and not outcome.loaded.notes  # both kept, nothing "de-duplicated"
    md = outcome.report_md.read_text()
    # Precisions (TF32 on and off among them: tf32, fp32) get a table each; the other settings share one.
    tables = md.split("### ms per step")[1:]
    headers = [h for table in tables for h in main_table_headers(table)]
    assert all(label in headers for label in labels), headers
    assert len(tables) == (2 if setting == "precision" else 1)
    estimates = [e for summary in outcome.summaries for e in summary.estimates.values()]
    assert len(estimates) == 2 and all(e.repeats == 1 for e in estimates)


def test_the_same_identity_from_two_folders_is_deduplicated_not_pooled_twice(tmp_path):
    write(tmp_path / "a", record("native-torch", "bert-fit", step_ms=STEPS))
    write(tmp_path / "b", record("native-torch", "bert-fit", step_ms=STEPS))
    loaded = loading.load_results([tmp_path / "a", tmp_path / "b"])
    assert loaded.table.num_rows == 1 and any("appears more than once" in n for n in loaded.notes)


def test_a_failed_rerun_beside_an_ok_row_never_hides_it_in_the_report(tmp_path):
    """The runner keeps an ok row when a later re-run of the same cell and repeat fails (it writes the failure
    beside it): the report must show the ok row, not the newer failure."""
    import datetime as dt

    ok = record("native-torch", "bert-fit", step_ms=STEPS)
    failed = record("native-torch", "bert-fit", status="device_unavailable", error_message="no GPU",
                    started_at=dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc), timed_steps=len(STEPS))
    write(tmp_path / "a", ok)
    write(tmp_path / "b", failed)
    loaded = loading.load_results([tmp_path / "a", tmp_path / "b"])
    assert loaded.table.num_rows == 1 and loaded.table.column("status").to_pylist() == ["ok"]
    assert any("kept the ok row" in note for note in loaded.notes)


def test_identity_round_trips_through_a_parquet_row(tmp_path):
    from fwbench.harness.cell import base_record
    from fwbench.core.results import normalise, read_row, write_row
    from fwbench.core.spec import CellSpec

    spec = CellSpec(stack="keras3-jax", task="sam-fit", preset="tiny", compile_mode="xla", data_dir="/d", steps=7,
                    precision="fp32", threads=3, image_variant="cpu", device_model="Some CPU", seed=4)
    path = write_row(base_record(spec) | {"status": "error"}, tmp_path / "x.parquet")
    row = read_row(path)
    assert CellIdentity.of_row(row) == spec.identity
    assert row["settings_id"] == spec.identity.settings_id == CellIdentity.of_row(normalise(row)).settings_id



def test_a_comparison_along_an_axis_holds_every_other_field_equal():
    from fwbench.core.identity import held_equal, off_headline
    from fwbench.core.spec import CellSpec

    def cell(stack="keras3-jax", compile_mode="xla", **settings):
        return CellSpec(stack=stack, task="bert-fit", preset="tiny", compile_mode=compile_mode, data_dir="/d", steps=5,
                        **settings).identity

    def comparable(a, b, along) -> bool:
        return held_equal(a, along) == held_equal(b, along)

    one, two = cell(), cell(devices=2)
    assert comparable(one, two, ["devices"]) and not comparable(one, two, ["stack", "compile_mode"])
    assert comparable(one, cell("native-torch", "none"), ["stack", "compile_mode"])
    assert not comparable(two, cell("native-torch", "none"), ["stack", "compile_mode"])  # 2 devices against 1
    assert not comparable(one, cell(devices=2, threads=9), ["devices"])  # another setting differs too
    assert held_equal(two, ["devices"]).setting("devices") is None and held_equal(one, ["stack"]).stack is None
    with pytest.raises(ValueError, match="not an identity field: gpu"):
        held_equal(one, ["gpu"])
    assert off_headline(one) == () and off_headline(two) == ("devices",)
    assert off_headline(cell(devices=2, global_batch=8, sweep_point="x==1"), "scaling") == ("devices", "global_batch")
    assert off_headline(cell(sweep_point="x==1")) == ("sweep_point",)

# --- rows are untrusted input ---------------------------------------------------------------------------

BAD_FIELDS = [
    ("ms_per_step", math.nan, "not a positive finite number"),
    ("ms_per_step", math.inf, "not a positive finite number"),
    ("ms_per_step", -3.0, "not a positive finite number"),
    ("step_ms", [5.0, 0.0, 5.1], "a step_ms value that is not a positive finite number"),
    ("step_ms", [5.0, -1.0], "a step_ms value that is not a positive finite number"),
    ("step_ms", [5.0, math.nan], "a step_ms value that is not a positive finite number"),
    ("step_ms", [math.inf, 5.0], "a step_ms value that is not a positive finite number"),
    ("preset", "../../evil", "unknown preset"),
    ("stack", "native-torch/../../x", "unknown stack"),
    ("task", "bert-fit\nforged", "unknown task"),
    ("compile_mode", "xla", "unknown compile_mode"),
    ("tf32_setting", "sometimes", "unknown tf32_setting"),
    ("pin_set", "../current", "invalid pin_set"),
    ("cell_id", "native-torch.other.tiny.compile-none", "cell_id"),
]


@pytest.fixture(scope="module")
def aggregate_of_every_bad_row(tmp_path_factory):
    """One good row and every bad one, each in a file of its own, through one real `fwbench aggregate` (a
    process each would cost two seconds a case, for the same checks)."""
    work = tmp_path_factory.mktemp("bad-rows")
    write(work / "res", record("native-torch", "bert-predict", step_ms=STEPS))  # one good file
    bad_files = []
    for index, (field, value, _reason) in enumerate(BAD_FIELDS):
        rec = record("native-torch", "bert-fit", step_ms=STEPS)
        rec[field] = value
        bad_files.append(write_named(work / "res", rec | {"preset": "tiny", "stack": "native-torch"} | {field: value},
                                     f"bad-{index}.parquet") if field not in ("preset", "stack")
                         else _write_raw(work / "res", rec, f"bad-{index}.parquet"))
    before = tree_digest(work)
    run = subprocess.run([str(FWBENCH), "aggregate", str(work / "res"), "-o", str(work / "rep")],
                         capture_output=True, text=True, timeout=120)
    return run, bad_files, set(tree_digest(work)) - set(before)


@pytest.mark.parametrize("case", range(len(BAD_FIELDS)), ids=[f"{f}={v!r}" for f, v, _ in BAD_FIELDS])
def test_invalid_rows_are_skipped_with_one_line_naming_the_file(aggregate_of_every_bad_row, case):
    run, bad_files, written = aggregate_of_every_bad_row
    assert run.returncode == 0 and "Traceback" not in run.stderr + run.stdout, run.stderr
    lines = [line for line in run.stderr.splitlines() if str(bad_files[case]) in line]
    assert len(lines) == 1 and BAD_FIELDS[case][2] in lines[0], run.stderr
    assert written and all(name.startswith("rep/") for name in written), written  # nothing outside the report


def _write_raw(out: Path, rec: dict, name: str = "bad.parquet") -> Path:
    """A row whose own stack/preset would make an unsafe path: written under a fixed, safe name."""
    from fwbench.core.results import SCHEMA, normalise

    path = Path(out) / "raw" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([normalise(rec)], schema=SCHEMA), path)
    return path


def test_schema_v1_rows_are_still_read(tmp_path):
    from fwbench.core.schema import ADDED_IN_V2

    good = write(tmp_path / "v1", record("native-torch", "bert-fit", step_ms=STEPS))
    table = pq.read_table(good)
    table = table.drop_columns(list(ADDED_IN_V2)).set_column(0, table.schema.field("schema_version"), pa.array([1]))
    pq.write_table(table, good)
    loaded = loading.load_results([tmp_path / "v1"])
    assert loaded.table.num_rows == 1 and not loaded.skipped


# --- busy rows -------------------------------------------------------------------------------------------

def test_busy_rows_are_flagged_and_left_out_of_rankings_unless_asked(tmp_path):
    write(tmp_path / "res", record("native-torch", "bert-fit", step_ms=STEPS))
    write(tmp_path / "res", record("keras3-jax", "bert-fit", step_ms=[v * 30 for v in STEPS], busy=True,
                                   busy_reasons="other processes used 1.80 CPU cores while the cell was timed"))
    outcome = aggregate([tmp_path / "res"], tmp_path / "rep")
    md = outcome.report_md.read_text()
    assert "## Busy rows" in md and "other processes used 1.80 CPU cores" in md
    bert = next(line for line in md.splitlines() if line.startswith("| bert-fit |"))
    busy_median = 30 * float(np.median(STEPS))
    assert f"{fmt_ms(busy_median)} [" in bert and "⚠" in bert  # the busy cell shows its number, marked
    (summary,) = outcome.summaries
    assert [v.stack for v, _ in summary.ranked("bert-fit")] == ["native-torch"]
    assert summary.keras3_best("bert-fit") is None  # nor is it the Keras 3 best or in a speed-up
    assert all(summary.speedup("bert-fit", key) is None for _, key in SPEEDUP_BASELINES)
    printed = CliRunner().invoke(app, ["aggregate", str(tmp_path / "res"), "--output", str(tmp_path / "rep3")])
    assert printed.exit_code == 0 and "⚠ measured only while something competed" in " ".join(printed.output.split())
    included = aggregate([tmp_path / "res"], tmp_path / "rep2", include_busy=True)
    # --include-busy shows the busy cell's number in the tables, but busy rows still decide nothing (issue 49)
    assert any(v.stack == "keras3-jax" for _, v in included.summaries[0].estimates)
    assert [v.stack for v, _ in included.summaries[0].ranked("bert-fit")] == ["native-torch"]
    assert included.summaries[0].keras3_best("bert-fit") is None
    assert "included in the tables" in included.report_md.read_text()


# --- compare -----------------------------------------------------------------------------------------------

def _single_repeat_runs(tmp_path, slow_factor: float, steps=STEPS):
    write(tmp_path / "a", record("native-torch", "bert-fit", step_ms=steps))
    write(tmp_path / "a", record("native-torch", "sam-fit", step_ms=steps))
    write(tmp_path / "b", record("native-torch", "bert-fit", step_ms=[v * slow_factor for v in steps]))
    write(tmp_path / "b", record("native-torch", "sam-fit", step_ms=steps))
    return tmp_path / "a", tmp_path / "b"


def test_single_repeat_compare_claims_no_significance_and_the_gate_refuses_even_a_30x_slowdown(tmp_path):
    a, b = _single_repeat_runs(tmp_path, 30.0)
    rows = cmp.compare(loading.load_results([a]), loading.load_results([b]))
    assert all(r.p_value is None and r.verdict == "not testable: needs 3 repeats a side; A has 1, B has 1"
               for r in rows)
    slowed = next(r for r in rows if r.task == "bert-fit")
    assert slowed.ratio == pytest.approx(30) and slowed.ratio_low > 10  # descriptive interval, still shown
    run = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert run.exit_code == 0 and "no significance test is made" in run.output
    gated = CliRunner().invoke(app, ["compare", str(a), str(b), "--fail-above", "10"])
    assert gated.exit_code == 2 and "cannot gate with --fail-above: 2 cell(s) lack 3 repeats a side" in gated.output


def test_gate_refuses_cells_with_too_few_samples(tmp_path):
    a, b = _single_repeat_runs(tmp_path, 30.0, steps=[5.0, 5.1])
    run = CliRunner().invoke(app, ["compare", str(a), str(b), "--fail-above", "10"])
    assert run.exit_code == 2 and "cannot gate with --fail-above" in run.output
    assert "--repeats 3" in run.output


def test_compare_pairs_by_identity_and_names_cells_without_partner(tmp_path):
    # Rows written before --precision existed (no precision column): their TF32 setting is the precision.
    write(tmp_path / "a", record("native-torch", "bert-fit", step_ms=STEPS, tf32_setting="off"))
    write(tmp_path / "b", record("native-torch", "bert-fit", step_ms=STEPS, tf32_setting="on"))
    rows = cmp.compare(loading.load_results([tmp_path / "a"]), loading.load_results([tmp_path / "b"]))
    assert sorted((r.verdict, r.variant.label) for r in rows) == [
        ("only in A", "native-torch [none, precision=fp32]"), ("only in B", "native-torch [none, precision=tf32]")]


def test_repeats_are_the_unit_of_the_test(tmp_path):
    """Three repeats a side: Welch on repeat medians; identical runs are not significant."""
    import numpy as np

    rng = np.random.default_rng(0)
    for side, factor in (("a", 1.0), ("b", 1.5), ("c", 1.0)):
        for r in range(3):
            write(tmp_path / side, record("native-torch", "bert-fit", repeat=r,
                                         step_ms=5 * factor * np.exp(rng.normal(0, 0.02, 20))))
    (slow,) = cmp.compare(loading.load_results([tmp_path / "a"]), loading.load_results([tmp_path / "b"]))
    assert slow.method == cmp.METHOD_REPEATS and slow.verdict == "slower" and slow.ratio == pytest.approx(1.5, rel=0.05)
    (same,) = cmp.compare(loading.load_results([tmp_path / "a"]), loading.load_results([tmp_path / "c"]))
    assert same.verdict.startswith("not significant")


def test_jit_policy_is_part_of_the_identity_of_keras_cells_only():
    import os

    from fwbench.engines import matrix
    from fwbench.core.spec import CellSpec

    base = CellSpec(stack="", task="", preset="tiny", compile_mode="", data_dir="/d", steps=5,
                    threads=os.cpu_count(), jit="on")
    specs = matrix.plan(["keras3-jax", "native-torch"], ["bert-fit"], "tiny", None, 1, base=base)
    by_stack = {s.stack: s for s in specs}
    assert by_stack["keras3-jax"].jit == "on" and by_stack["native-torch"].jit == "published"
    assert results.readable_path(by_stack["keras3-jax"], Path("r")).name == "bert-fit.compile-xla.jit-on.r0.parquet"
    assert results.readable_path(by_stack["native-torch"], Path("r")).name == "bert-fit.compile-none.r0.parquet"
