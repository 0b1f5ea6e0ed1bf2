"""`fwbench stability` (docs/workloads.md#stability): the divergence rule, the record and its file, the command's
refusals, the report's Stability section, and (integration) a planted fp16 overflow whose skipped step and loss-scale
back-off the records show."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from fwbench.core import models, stability
from tests import aggregator_rows
from tests.conftest import run_fwbench
from tests.rotation import rotated


WEIGHTS = "5e" * 32  # an initial-weights checksum (both fits of a record start from it unless a test says otherwise)


def cell_record(losses, *, precision="fp16", status="ok", **fields) -> dict:
    """A stability fit's cell-process record, as fwbench.harness.cell writes it (the identity columns of
    base_record(stability_spec(...)) included)."""
    return {"fwbench_version": "0.1.0", "record_id": uuid.uuid4().hex, "started_at": "2026-11-25T20:00:00+00:00",
            "stack": "keras3-jax", "task": "bert-fit", "model": "bert", "preset": "tiny", "precision": precision,
            "pin_set": "current", "compile_mode": "xla", "engine": "local", "image_variant": "venv", "device": "cpu",
            "device_model": "Test CPU", "data_seed": 0, "learnable_target": "label = f(tokens)", "status": status,
            "jit_policy": "published", "threads": 2, "warmup_steps": 0, "timed_steps": max(len(losses) - 1, 0),
            "per_step_sync": True, "devices": 1, "global_batch_setting": None, "initial_weights_sha256": WEIGHTS,
            "stability_steps": len(losses), "stability_losses": list(losses), **fields}


FALLING = [0.7 * 0.98 ** t for t in range(40)]


def test_deviation_is_relative_to_fp32_with_a_floor_near_zero():
    baseline = [1.0, 0.5, 0.001]
    deviation, step = stability.max_relative_deviation([1.1, 0.5, 0.002], baseline)
    # Step 2: |0.002 - 0.001| / max(0.001, 0.01 x 1.0) = 0.1, the same as step 0's 0.1/1.0; the first wins.
    assert math.isclose(deviation, 0.1) and step == 0
    deviation, step = stability.max_relative_deviation([1.0, float("nan"), 0.03], baseline)
    assert math.isclose(deviation, 2.9) and step == 2  # the NaN step is counted as non-finite, not compared
    assert stability.max_relative_deviation([1.0], [float("inf")]) == (None, None)


def test_the_divergence_rule():
    assert stability.verdict(FALLING, FALLING) == (False, None)
    diverged, why = stability.verdict([*FALLING[:-1], float("inf")], FALLING)
    assert diverged and "1 non-finite" in why
    flat = [0.7] * 40  # never learned: final 0.7 against fp32's 0.7 x 0.98^35..39 (about 0.33)
    diverged, why = stability.verdict(flat, FALLING)
    assert diverged and "> 2 x fp32's" in why
    assert stability.verdict([x * 1.5 for x in FALLING], FALLING)[0] is False  # within the factor of 2
    # fp32 fell to zero: the floor (0.01 x its first loss) keeps a tiny half-precision residue from "diverging".
    assert stability.verdict([0.7] + [0.01] * 39, [0.7] + [0.0] * 39)[0] is False


def test_overflow_fault_parses_and_plants_one_step():
    assert stability.overflow_step(None) is None and stability.overflow_step("nan-loss") is None
    assert stability.loss_multipliers("overflow:2", 4) == [1.0, 1.0, stability.OVERFLOW_LOSS_FACTOR, 1.0]
    assert stability.OVERFLOW_LOSS_FACTOR * 0.01 > float(np.finfo(np.float16).max)  # even a small loss overflows fp16
    with pytest.raises(stability.StabilityError, match="overflow:STEP"):
        stability.overflow_step("overflow:soon")


def test_learnable_targets_are_functions_of_the_inputs():
    rng = np.random.default_rng(0)
    arch = models.BERT.arch("tiny")
    arrays = models.BERT.inputs("tiny", "fit", 64, rng)
    learnable, rule = stability.learnable_inputs("bert", arch, arrays)
    first = arrays["token_ids"][:, 0]
    assert (learnable["labels"] == first * arch.num_classes // arch.vocab_size).all() and "token_ids[:, 0]" in rule
    assert set(learnable["labels"].tolist()) == {0, 1} and learnable["labels"].dtype == arrays["labels"].dtype
    assert (learnable["token_ids"] == arrays["token_ids"]).all()  # the inputs themselves are the shared bytes
    lm = models.GEMMA.arch("tiny")
    tokens = models.GEMMA.inputs("tiny", "fit", 4, rng)
    counted, _ = stability.learnable_inputs("gemma", lm, tokens)
    ids = counted["token_ids"]
    assert ((np.diff(ids, axis=1) == 1) | ((ids[:, 1:] == 3) & (ids[:, :-1] == lm.vocab_size - 1))).all()
    assert ids.min() >= 3 and ids.max() < lm.vocab_size


def test_record_is_composed_written_atomically_and_read_back(tmp_path):
    asked = cell_record([*FALLING[:20], FALLING[20] * stability.OVERFLOW_LOSS_FACTOR, *FALLING[21:]],
                        loss_scale=16384.0, loss_scale_initial=32768.0, loss_scale_skipped_steps=1,
                        compute_dtype="float16", library_versions={"keras": "3.15.1"}, fault="overflow:20")
    baseline = cell_record([*FALLING[:20], FALLING[20] * stability.OVERFLOW_LOSS_FACTOR, *FALLING[21:]],
                           precision="fp32")
    record = stability.compose(asked, baseline, wall_s=12.5, extra={"logs": ["a.log"]})
    assert (record["status"], record["diverged"], record["max_rel_deviation"]) == ("ok", False, 0.0)
    assert (record["loss_scale_initial"], record["loss_scale_final"], record["loss_scale_skipped_steps"]) == (
        32768.0, 16384.0, 1)
    assert record["initial_weights_sha256"] == record["baseline_initial_weights_sha256"] == WEIGHTS
    assert record["cell_id"] == "keras3-jax.bert-fit.tiny.compile-xla"
    path = stability.record_path(tmp_path, record)
    assert path.parent == tmp_path / "stability" / "tiny" / "keras3-jax"
    assert re.fullmatch(r"bert-fit\.fp16\.current\.cpu\.id-[0-9a-f]{10}\.stability\.parquet", path.name), path.name
    stability.write_record(record, path)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left beside it
    table = pq.read_table(path)
    assert table.schema.metadata[b"fwbench_stability_schema_version"] == b"2"
    [row] = table.to_pylist()
    assert row["losses"][20] == pytest.approx(FALLING[20] * stability.OVERFLOW_LOSS_FACTOR)
    assert row["fault"] == "overflow:20" and "keras" in row["library_versions"]


def test_unsupported_and_failed_baselines_are_records_with_the_reason():
    unsupported = cell_record([], status="unsupported", error_type="Unsupported",
                              error_message="the HF Trainer's fp16=True on cpu would train in float32")
    record = stability.compose(unsupported, None, wall_s=3.0)
    assert record["status"] == "unsupported" and "float32" in record["error_message"] and record.get("diverged") is None
    failed = stability.compose(cell_record(FALLING), cell_record([], precision="fp32", status="timeout",
                                                                 error_message="killed"), wall_s=3.0)
    assert failed["status"] == "error" and failed["error_message"].startswith("the fp32 baseline did not run")
    nonfinite = stability.compose(cell_record([*FALLING[:-1], float("nan")], status="diverged"),
                                  cell_record(FALLING, precision="fp32"), wall_s=3.0)
    assert nonfinite["status"] == "diverged" and nonfinite["nonfinite_steps"] == 1


def test_a_precision_run_is_never_compared_with_a_baseline_that_started_from_other_weights(tmp_path):
    """Before, the two fits were compared whatever they started from (Keras drew its initial weights from Python's
    unseeded `random`): max_rel_deviation partly measured the initialisation."""
    other = cell_record(FALLING, precision="fp32", initial_weights_sha256="0a" * 32)
    record = stability.compose(cell_record(FALLING), other, wall_s=1.0)
    assert (record["status"], record["error_type"]) == ("incomparable", "InitialWeightsDiffer")
    assert "did not start from the same weights" in record["error_message"]
    assert (record["initial_weights_sha256"], record["baseline_initial_weights_sha256"]) == (WEIGHTS, "0a" * 32)
    # Nothing is compared: no deviation, no verdict, no baseline losses beside the precision's.
    assert all(record.get(key) is None for key in ("max_rel_deviation", "diverged", "baseline_losses",
                                                    "baseline_final_loss"))
    # A pure-precision model (the LLMs under bf16) holds other bytes by construction: the record says so.
    llm = stability.compose(cell_record(FALLING, precision="bf16", variable_dtype="bfloat16"),
                            cell_record(FALLING, precision="fp32", variable_dtype="float32",
                                        initial_weights_sha256="0a" * 32), wall_s=1.0)
    assert llm["status"] == "incomparable" and "holds the weights in bfloat16, fp32 in float32" in llm["error_message"]
    # A fit without a checksum cannot show that it started alike: not compared either.
    unchecked = stability.compose(cell_record(FALLING), cell_record(FALLING, precision="fp32",
                                                                    initial_weights_sha256=None), wall_s=1.0)
    assert unchecked["status"] == "incomparable" and "the fp32 baseline" in unchecked["error_message"]
    path = stability.write_record(record, stability.record_path(tmp_path, record))
    assert pq.read_table(path).to_pylist()[0]["status"] == "incomparable"  # the schema knows the status


def test_records_of_other_steps_seed_device_or_fault_are_kept_apart(tmp_path):
    """Before, records were keyed by stack, task, precision, pin set and cpu/gpu only: a run with other --steps,
    --seed, GPU model or fault replaced the earlier record (same file), and the report kept one of them."""
    from fwbench_aggregator import loading

    def record(losses=FALLING, **fields):
        return stability.compose(cell_record(losses, **fields), cell_record(losses, precision="fp32", **fields),
                                 wall_s=1.0)

    variants = {"first": record(), "steps": record(FALLING[:30]), "seed": record(data_seed=1),
                "device": record(device_model="Other CPU"), "fault": record(fault="overflow:5")}
    paths = {name: stability.record_path(tmp_path, r) for name, r in variants.items()}
    assert len(set(paths.values())) == len(variants), paths
    assert stability.record_path(tmp_path, record()) == paths["first"]  # a rerun of one identity replaces its record
    for name, r in variants.items():
        stability.write_record(r, paths[name])
    stability.write_record(record(), paths["first"])
    loaded = loading.load_results([tmp_path], stability_only_ok=True)
    assert len(loaded.stability) == len(variants) and not loaded.notes
    def settings(records):
        return sorted(str((r["steps"], r["data_seed"], r["device_model"], r["fault"])) for r in records)
    assert settings(loaded.stability) == settings(variants.values())
    # Two records of one key (copied results): the newest stands, said in a note.
    rerun = {**variants["seed"], "started_at": "2026-11-26T20:00:00+00:00"}
    stability.write_record(rerun, tmp_path / "copy" / "seed.stability.parquet")
    loaded = loading.load_results([tmp_path], stability_only_ok=True)
    assert len(loaded.stability) == len(variants) and len(loaded.notes) == 1 and "appears more than once" in \
        loaded.notes[0]


def test_a_version_1_stability_record_is_still_read(tmp_path):
    """Records written before the identity and checksum columns (schema v1) read with them empty, keyed by the
    fields they have."""
    import pyarrow as pa
    from fwbench_aggregator import loading

    record = stability.compose(cell_record(FALLING), cell_record(FALLING, precision="fp32"), wall_s=1.0)
    table = pa.Table.from_pylist([stability.normalise(record)], schema=stability.schema())
    table = table.drop_columns(list(stability.ADDED_IN[2])).replace_schema_metadata(
        {"fwbench_stability_schema_version": "1"})
    pq.write_table(table, tmp_path / "old.stability.parquet")
    read = loading.read_stability_file(tmp_path / "old.stability.parquet")
    assert not isinstance(read, loading.SkippedFile), read
    assert read["settings_id"] is None and read["status"] == "ok"
    assert stability.record_key(read)[0] == "v1" and stability.record_key(read) != stability.record_key(record)


def _write_stability(out: Path, losses, baseline, **fields) -> Path:
    record = stability.compose(cell_record(losses, **fields), cell_record(baseline, precision="fp32"), wall_s=1.0)
    return stability.write_record(record, stability.record_path(out, record))


def test_report_has_a_stability_section_with_the_table(tmp_path):
    from fwbench_aggregator.aggregate import aggregate

    results = tmp_path / "results"
    aggregator_rows.write(results, aggregator_rows.record("native-torch", "bert-predict", step_ms=[2.0] * 5))
    _write_stability(results, FALLING, FALLING, loss_scale=16384.0, loss_scale_initial=32768.0,
                     loss_scale_skipped_steps=1)
    _write_stability(results, [0.7] * 40, FALLING, stack="keras3-torch")
    (results / "stability" / "tiny" / "keras3-jax" / "junk.stability.parquet").write_bytes(b"not parquet")
    outcome = aggregate([results], tmp_path / "report")
    markdown = outcome.report_md.read_text()
    section = markdown.split("## Stability", 1)[1]
    assert "| keras3-jax | bert-fit | fp16 | tiny | cpu | 40 | 0 | ok |" in section
    assert "32768 → 16384" in section and "| 1 |" in section  # the scale's back-off and the skipped step
    assert "| keras3-torch | bert-fit | fp16 |" in section and "diverged" in section and "> 2 x fp32's" in section
    assert "1 of 2 stability run(s) diverged" in section
    assert f"{stability.DIVERGENCE_FACTOR:g} × fp32's" in section  # the rule, stated where the numbers are
    assert "junk.stability.parquet" in markdown.split("## Stability", 1)[0]  # skipped, with one line
    html = outcome.report_html.read_text()
    assert "Stability" in html and "32768 → 16384" in html
    assert (tmp_path / "report" / "stability.png").stat().st_size > 0 and "stability.png" in section
    assert len(outcome.loaded.table) == 1  # stability records never become cell rows


def test_stability_records_alone_make_a_report(tmp_path):
    from fwbench_aggregator.aggregate import aggregate

    from fwbench_aggregator import loading
    from fwbench_aggregator.errors import NoResultsError

    _write_stability(tmp_path / "results", FALLING, FALLING)
    outcome = aggregate([tmp_path / "results"], tmp_path / "report")
    assert "## Stability" in outcome.report_md.read_text()
    with pytest.raises(NoResultsError, match="stability records"):  # compare and verify need cell rows
        loading.load_results([tmp_path / "results"])


@pytest.mark.parametrize("args, message", [
    (["--task", "bert-predict"], "stability runs fit tasks only: bert-predict is a predict task"),
    (["--task", "bert-fit", "--steps", "1"], "--steps must be at least 2"),
    (["--task", "bert-fit", "--inject-fault", "overflow:x"], "expected overflow:STEP"),
    (["--task", "bert-fit", "--inject-fault", "overflow:300"], "past the last step (299)"),
    (["--task", "bert-fit", "--inject-fault", "nan-loss"], "takes overflow:STEP only"),
    (["--task", "bert-fly"], "unknown task 'bert-fly'"),
    (["--task", "bert-fit", "--precision", "fp8"], "unknown --precision 'fp8'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, args, message):
    from fwbench.cli.commands import main

    monkeypatch.setattr(sys, "argv", ["fwbench", "stability", "--stack", "native-torch", "--precision", "fp16",
                                      "--out", str(tmp_path / "out"), *args])
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.splitlines() == [err.strip()] and message in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.integration
def test_planted_fp16_overflow_is_a_skipped_step_and_a_halved_scale(tmp_path, shared_data):
    """A loss scaled into float16 overflow at step 10 of 30: the GradScaler (native-torch) and the LossScaleOptimizer
    (keras3-jax) each skip that step and halve their scale, and the records say so. native-torch's bert-fit cannot
    run fp16 on a CPU (the HF Trainer would train in float32): its record says so, and sam-fit (a hand-written loop
    with torch.amp.GradScaler) stands in. About 2 minutes on the 2-core development machine (5 fit processes)."""
    common = ["--precision", "fp16", "--steps", "30", "--inject-fault", "overflow:10", "--preset", "tiny",
              "--threads", "1", "--device", "cpu", "--data", str(shared_data), "--out", str(tmp_path)]
    for stack, tasks in (("native-torch", ["bert-fit", "sam-fit"]), ("keras3-jax", ["bert-fit"])):
        done = run_fwbench("stability", "--stack", stack, *[a for t in tasks for a in ("--task", t)], *common)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = {(r["stack"], r["task"]): r for r in (pq.read_table(p).to_pylist()[0]
                                                    for p in tmp_path.rglob(f"*{stability.FILE_SUFFIX}"))}
    trap = records.pop(("native-torch", "bert-fit"))
    assert trap["status"] == "unsupported" and "would train in float32" in trap["error_message"]
    assert set(records) == {("native-torch", "sam-fit"), ("keras3-jax", "bert-fit")}
    for key, record in records.items():
        assert record["status"] in ("ok", "diverged"), (key, record["error_message"])
        assert record["compute_dtype"] == "float16", key
        assert record["loss_scale_skipped_steps"] == 1, key
        assert record["loss_scale_final"] == record["loss_scale_initial"] / 2, key  # the back-off
        losses, baseline = record["losses"], record["baseline_losses"]
        assert len(losses) == len(baseline) == 30 and record["nonfinite_steps"] == 0, key
        # The planted step is the one whose loss was scaled; before it the learnable target's loss falls.
        assert int(np.argmax(losses)) == 10 and int(np.argmax(baseline)) == 10, key
        assert losses[9] < losses[0], key


def test_docs_list_every_stability_column_and_state_the_rule():
    root = Path(__file__).resolve().parents[1]
    schema_doc = (root / "docs" / "results-schema.md").read_text()
    section = schema_doc.split("## Stability records", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^\| `([a-z0-9_]+)` \|", section, flags=re.M) == list(stability.COLUMN_NAMES)
    workloads = (root / "docs" / "workloads.md").read_text().split("## Stability", 1)[1]
    assert f"**{stability.DIVERGENCE_FACTOR:g}×**" in workloads and f"last {stability.FINAL_WINDOW} steps" in workloads
    assert f"{stability.RELATIVE_FLOOR:g} × |loss_fp32(0)|" in workloads


def test_stability_spec_runs_every_step_at_the_stacks_default_compile_mode_and_old_specs_still_read():
    from fwbench.core.spec import CellSpec
    from fwbench.engines.stability import stability_spec

    base = CellSpec(stack="", task="", preset="tiny", compile_mode="", data_dir="/d", steps=None, precision="fp16",
                    fault="overflow:5")
    spec = stability_spec(base, stack="keras3-jax", task="bert-fit", steps=30)
    # 1 + warmup + steps = 30: every step's loss counts, none is a warm-up.
    assert (spec.compile_mode, spec.warmup, spec.steps, spec.stability_run) == ("xla", 0, 29, True)
    assert CellSpec.from_json(spec.to_json()) == spec
    assert "stability_run" not in replace(spec, stability_run=False).to_json()  # a timed cell's JSON is as before


def test_a_stability_record_naming_an_unknown_stack_is_skipped_with_one_line(tmp_path):
    """Records are untrusted input, as rows are: a value outside the registry never reaches the report."""
    from fwbench_aggregator import loading

    record = stability.compose(cell_record(FALLING), cell_record(FALLING, precision="fp32"), wall_s=1.0)
    path = stability.write_record({**record, "stack": "<script>"}, tmp_path / "x.stability.parquet")
    skipped = loading.read_stability_file(path)
    assert isinstance(skipped, loading.SkippedFile) and "unknown stack" in skipped.reason
    good = stability.write_record(record, tmp_path / "y.stability.parquet")
    assert loading.read_stability_file(good)["losses"] == pytest.approx(FALLING)


def test_a_stability_fit_gets_one_gpu_and_an_engine_failing_mid_fit_leaves_a_record(tmp_path, monkeypatch):
    """The engine and NVML are the boundary (no GPU here): a 2-GPU host whose engine stops answering mid-fit.
    Before, the fit saw every GPU of the host (no slot placed it) and the engine's exception ended the command."""
    from fwbench.core.spec import CellSpec
    from fwbench.engines import slots
    from fwbench.engines.stability import run_stability, stability_spec

    class Engine:
        name, device, pin_set = "local", "gpu", "current"
        seen: list = []

        def image_variant(self, stack):
            return "venv-gpu"

        def device_model(self, gpu=None):
            return "NVIDIA H100 80GB HBM3"

        def run_cell(self, spec, record_path, log_path):
            self.seen.append(spec.gpus)
            raise ConnectionError("Read timed out. (read timeout=600)")

    monkeypatch.setattr(slots, "usable_gpus", lambda: [0, 1])
    base = CellSpec(stack="", task="", preset="tiny", compile_mode="", data_dir=str(tmp_path), steps=None,
                    precision="fp16")
    record, path = run_stability(Engine(), stability_spec(base, stack="keras3-jax", task="bert-fit", steps=10),
                                 tmp_path / "out")
    assert Engine.seen == [(0,)]
    assert record["status"] == "error" and "engine failed around the cell: ConnectionError" in record["error_message"]
    assert path.is_file()


# -- integration: every fit starts from weights seeded by --seed ------------------------------------------------

OTHER_SEED_STACKS = ("keras3-jax", "native-torch")
# The two seeding idioms' stacks every run, the other Keras 3 backends by rotation (CI time; tests/rotation.py).
SEEDED_STACKS = tuple(rotated(("keras3-jax", "keras3-tensorflow", "keras3-torch", "native-torch"),
                              always=OTHER_SEED_STACKS, per_run=1))


@pytest.fixture(scope="module")
def seeded_fits(tmp_path_factory, shared_data):
    """bert-fit on SEEDED_STACKS (this run's Keras backends and native-torch): one `fwbench stability --precision
    published` (for bert-fit the same float32 arithmetic as its fp32 baseline: two fits at seed 0) and one timed
    `fwbench run` at seed 1 (its own data folder: a folder holds one seed's data) on one stack of each seeding idiom.
    8 fit processes."""
    out = tmp_path_factory.mktemp("seeded-fits")
    stacks = [argument for stack in SEEDED_STACKS for argument in ("--stack", stack)]
    common = ["--task", "bert-fit", "--preset", "tiny", "--threads", "1", "--device", "cpu"]
    done = run_fwbench("stability", *stacks, *common, "--precision", "published", "--steps", "3",
                       "--data", str(shared_data), "--out", str(out / "stability-run"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # Another seed on one stack of each seeding idiom (Keras's set_random_seed for every backend, torch's own).
    other_seed = [argument for stack in OTHER_SEED_STACKS for argument in ("--stack", stack)]
    done = run_fwbench("run", *other_seed, *common, "--engine", "local", "--seed", "1", "--warmup", "0", "--steps", "1",
                       "--data", str(out / "data-seed-1"), "--out", str(out / "seed-1"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = {r["stack"]: r for r in (pq.read_table(p).to_pylist()[0]
                                       for p in (out / "stability-run").rglob(f"*{stability.FILE_SUFFIX}"))}
    rows = {r["stack"]: r for r in (pq.read_table(p).to_pylist()[0] for p in (out / "seed-1").rglob("*.parquet"))}
    return records, rows


@pytest.mark.integration
def test_two_fits_at_one_seed_start_from_the_same_weights_on_every_stack(seeded_fits):
    """Before, only scaling cells were seeded: Keras's initialisers drew from Python's unseeded `random`, native-torch
    from torch's unseeded generator, another start per process (bert-fit published against fp32, the same arithmetic,
    deviated by 0.6-3.9% from the initialisation alone); rows had no checksum."""
    records, _ = seeded_fits
    assert set(records) == set(SEEDED_STACKS)
    for stack, record in records.items():
        assert record["status"] == "ok", (stack, record["error_message"])
        assert re.fullmatch(r"[0-9a-f]{64}", record["initial_weights_sha256"] or ""), stack
        assert record["initial_weights_sha256"] == record["baseline_initial_weights_sha256"], stack
        # The same start and the same float32 arithmetic: the deviation no longer measures the initialisation.
        assert record["max_rel_deviation"] < 1e-6, (stack, record["losses"], record["baseline_losses"])


@pytest.mark.integration
def test_another_seed_starts_from_other_weights_in_each_seeding_idiom(seeded_fits):
    records, rows = seeded_fits
    assert set(rows) == set(OTHER_SEED_STACKS)
    for stack, row in rows.items():
        assert row["status"] == "ok" and row["data_seed"] == 1, (stack, row["error_message"])
        assert re.fullmatch(r"[0-9a-f]{64}", row["initial_weights_sha256"] or ""), stack
        assert row["initial_weights_sha256"] != records[stack]["initial_weights_sha256"], stack
        assert json.loads(row["extra"])["initial_weights_s"] >= 0  # read outside the timed window, timed apart
