"""`fwbench stability` (docs/workloads.md#stability): the divergence rule, the record and its file, the command's
refusals, the report's Stability section, and (integration) a planted fp16 overflow whose skipped step and loss-scale
back-off the records show."""

from __future__ import annotations

import datetime as dt
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


def cell_record(losses, *, precision="fp16", status="ok", **fields) -> dict:
    """A stability fit's cell-process record, as fwbench.harness.cell writes it."""
    return {"fwbench_version": "0.1.0", "record_id": uuid.uuid4().hex, "started_at": "2026-11-25T20:00:00+00:00",
            "stack": "keras3-jax", "task": "bert-fit", "model": "bert", "preset": "tiny", "precision": precision,
            "pin_set": "current", "compile_mode": "xla", "engine": "local", "image_variant": "venv", "device": "cpu",
            "device_model": "Test CPU", "data_seed": 0, "learnable_target": "label = f(tokens)", "status": status,
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
    path = stability.record_path(tmp_path, record)
    assert path == tmp_path / "stability" / "tiny" / "keras3-jax" / "bert-fit.fp16.current.cpu.stability.parquet"
    stability.write_record(record, path)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left beside it
    table = pq.read_table(path)
    assert table.schema.metadata[b"fwbench_stability_schema_version"] == b"1"
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
    assert "| keras3-jax | bert-fit | fp16 | tiny | cpu | 40 | ok |" in section
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
