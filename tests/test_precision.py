"""Precision as an axis (docs/workloads.md#precision): what each stack really computed in, unsupported instead of a
silent fallback, and a fit whose loss goes non-finite recorded as diverged."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from fwbench.core import precision, registry, results
from fwbench.core.schema import ADDED_IN, STATUSES
from fwbench.core.spec import CellSpec
from tests.conftest import run_fwbench
from tests.rotation import rotated, skip_reason

ROOT = Path(__file__).resolve().parents[1]
STACKS = list(registry.REPORT_ORDER)
# native-torch (its own autocast and Trainer paths, the CPU fp16 trap) every run; one Keras stack by rotation (CI time).
PRECISION_STACKS = rotated(STACKS, always=("native-torch",), per_run=1)


def test_precision_values_and_their_tf32_policy():
    assert precision.PRECISIONS == ("published", "fp32", "tf32", "bf16", "fp16")
    assert [precision.tf32_of(p) for p in precision.PRECISIONS] == ["default", "off", "on", "off", "off"]
    # --tf32 is an alias of the one axis: on is tf32, off is fp32; a contradiction is refused.
    assert [precision.from_tf32(t) for t in ("default", "on", "off")] == ["published", "tf32", "fp32"]
    assert precision.from_tf32("on", "tf32") == "tf32" and precision.from_tf32("default", "bf16") == "bf16"
    with pytest.raises(ValueError, match="contradicts --precision fp32"):
        precision.from_tf32("on", "fp32")
    # Rows and specs written before --precision existed read as the precision their TF32 setting means.
    assert [precision.of_row({"tf32_setting": t}) for t in ("default", "on", "off", None)] == [
        "published", "tf32", "fp32", "published"]
    assert precision.of_row({"precision": "bf16", "tf32_setting": "off"}) == "bf16"
    legacy = CellSpec.from_json('{"stack": "native-torch", "task": "bert-fit", "preset": "tiny", '
                                '"compile_mode": "none", "data_dir": "/d", "steps": 1, "tf32": "on"}')
    assert legacy.precision == "tf32" and legacy.tf32 == "on"
    assert [precision.expected_compute_dtype(p, "bert") for p in precision.PRECISIONS] == [
        "float32", "float32", "float32", "bfloat16", "float16"]
    assert [precision.expected_compute_dtype(p, "gemma") for p in precision.PRECISIONS] == [
        "bfloat16", "float32", "float32", "bfloat16", "float16"]
    assert {"precision", "compute_dtype", "nonfinite_losses"} <= set(ADDED_IN[7]) and "diverged" in STATUSES
    # A published spec reads as one written before --precision existed (an older image still reads it).
    spec = CellSpec(stack="native-torch", task="bert-fit", preset="tiny", compile_mode="none", data_dir="/d", steps=1)
    assert "precision" not in spec.to_json()
    assert CellSpec.from_json(spec.to_json()).precision == "published"


@pytest.fixture(scope="module")
def bert_bf16(tmp_path_factory, shared_data):
    """bert-fit and bert-predict at --precision bf16 on this run's stacks (one at a time: 2 cores)."""
    out = tmp_path_factory.mktemp("precision-bf16")
    for stack in PRECISION_STACKS:
        run_fwbench("run", "--stack", stack, "--task", "bert-fit", "--task", "bert-predict", "--preset", "tiny",
                    "--threads", "1", "--precision", "bf16", "--out", str(out), "--data", str(shared_data))
    return {(r["stack"], r["task"]): r for r in map(results.read_row, sorted(out.rglob("*.parquet")))}


@pytest.mark.integration
@pytest.mark.parametrize("stack", STACKS)
def test_bf16_bert_computes_in_bfloat16_with_float32_variables(stack, bert_bf16):
    if stack not in PRECISION_STACKS:
        pytest.skip(skip_reason(stack, PRECISION_STACKS))
    for task in ("bert-fit", "bert-predict"):
        row = bert_bf16[(stack, task)]
        assert row["status"] == "ok", (stack, task, row["error_message"])
        assert row["precision"] == "bf16" and row["dtype"] == "bfloat16"
        # Inspected from what ran (a hook on the model's first dense layer), not the setting.
        assert row["compute_dtype"] == "bfloat16", (stack, task)
        assert row["variable_dtype"] == "float32", (stack, task)  # mixed precision: float32 variables
        assert row["tf32_matmul"] is False  # bf16's float32 leftovers run without TF32
        if task == "bert-fit":
            assert row["nonfinite_losses"] == 0 and row["loss_scale"] is None


@pytest.mark.integration
def test_fp16_rows_are_ok_or_unsupported_with_a_reason(tmp_path, shared_data):
    """A fit per stack at fp16, and native-torch's predict. native-torch's Trainer fit at fp16 on a CPU is the known
    trap (accepted, but trains in float32): unsupported with the reason; its autocast predict really runs float16.
    The Keras stacks: mixed_float16 with the LossScaleOptimizer's loss scaling, recorded. The Keras stacks' fp16
    predict is not run here (CI time): it is the bf16 test's predict path under the other mixed policy. The Keras
    stacks by rotation, as the bf16 test's."""
    for stack in PRECISION_STACKS:
        tasks = ["bert-fit", "bert-predict"] if stack == "native-torch" else ["bert-fit"]
        run_fwbench("run", "--stack", stack, *[a for task in tasks for a in ("--task", task)], "--preset", "tiny",
                    "--threads", "1", "--precision", "fp16", "--out", str(tmp_path), "--data", str(shared_data))
    got = {(r["stack"], r["task"]): r for r in map(results.read_row, sorted(tmp_path.rglob("*.parquet")))}
    trap = got[("native-torch", "bert-fit")]
    assert trap["status"] == "unsupported" and "fp16=True on cpu would train in float32" in trap["error_message"]
    for key, row in got.items():
        assert row["precision"] == "fp16"
        if row["status"] == "unsupported":
            assert row["error_message"], key
            continue
        assert row["status"] == "ok", (key, row["error_message"])
        assert row["compute_dtype"] == "float16", key
    assert sorted(got) == sorted([(stack, "bert-fit") for stack in PRECISION_STACKS]
                                 + [("native-torch", "bert-predict")])
    for stack in PRECISION_STACKS:
        fit = got[(stack, "bert-fit")]
        if stack != "native-torch":  # the Keras stacks' fp16 bert-fit runs on a CPU (docs/workloads.md#precision)
            assert fit["status"] == "ok", (stack, fit["error_message"])
            assert fit["loss_scale"] > 0 and fit["loss_scale_skipped_steps"] >= 0, stack


@pytest.mark.integration
def test_cpu_trainer_fp16_trap_is_detected():
    """TrainingArguments(fp16=True) on a CPU: accelerate keeps autocast and the scaler off, so the fit would be
    float32; bf16=True on a CPU does run autocast."""
    probe = """
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
from fwbench.workloads.torch.trainer import trainer_amp_unsupported
model = BertForSequenceClassification(BertConfig(vocab_size=32, hidden_size=8, num_hidden_layers=1,
                                                 num_attention_heads=2, intermediate_size=8))
for flag, half in (("fp16", "float16"), ("bf16", "bfloat16")):
    args = TrainingArguments(output_dir="/tmp/fwbench-trap", use_cpu=True, report_to=[], **{flag: True})
    print(flag, repr(trainer_amp_unsupported(Trainer(model=model, args=args), half)))
"""
    python = run_fwbench("env", "path", "native-torch").stdout.strip()
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT / "runner"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.strip().splitlines()[-2:])
    assert "would train in float32" in lines["fp16"] and lines["bf16"] == "None"


@pytest.mark.integration
def test_a_non_finite_loss_makes_the_fit_diverged(tmp_path, shared_data):
    done = run_fwbench("run", "--stack", "native-torch", "--task", "sam-fit", "--preset", "tiny", "--threads", "1",
                       "--precision", "fp16", "--inject-fault", "nan-loss", "--out", str(tmp_path),
                       "--data", str(shared_data))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]  # a result, not a failure
    [row] = map(results.read_row, tmp_path.rglob("*.parquet"))
    assert row["status"] == "diverged" and row["nonfinite_losses"] == 1
    assert row["ms_per_step"] > 0  # the timings stay on the row
    # fp16 on the hand-written loop: autocast float16 with torch.amp.GradScaler, its scale recorded.
    assert row["compute_dtype"] == "float16" and row["variable_dtype"] == "float32"
    assert row["loss_scale"] > 0 and row["loss_scale_skipped_steps"] >= 0


def test_a_library_without_the_precision_s_kernel_is_unsupported_not_an_error():
    from fwbench.harness.cell import precision_unsupported

    # XLA:CPU's own words for keras3-jax Mistral at fp16 (benchmarks/precision_matrix.py, 2026-11-25).
    xla = RuntimeError("INVALID_ARGUMENT: The precision 'F16_F16_F32' is not supported by dot_general on CPU")
    spec = CellSpec(stack="keras3-jax", task="mistral-fit", preset="tiny", compile_mode="xla", data_dir="/d", steps=1)
    assert precision_unsupported(replace(spec, precision="fp16"), xla)
    assert not precision_unsupported(spec, xla)  # at the published precision it is an error like any other
    assert not precision_unsupported(replace(spec, precision="fp16"), RuntimeError("out of range"))


def test_precision_option_is_validated():
    done = run_fwbench("run", "--stack", "native-torch", "--precision", "fp8", "--out", "/tmp/never-written")
    assert done.returncode != 0 and "unknown --precision" in done.stdout + done.stderr
    done = run_fwbench("run", "--stack", "native-torch", "--precision", "fp32", "--tf32", "on",
                       "--out", "/tmp/never-written")
    assert done.returncode != 0 and "contradicts" in done.stdout + done.stderr


# --- a precision the device cannot run is unsupported, decided by the harness at run time -------------------------
# There is no GPU here: the CUDA boundary is mocked, nothing else. torch is a stand-in module whose torch.cuda reports
# one GPU of a given compute capability (or none: a CPU host); JAX's device objects and TensorFlow's device details
# likewise. The backends, the harness's build_cell and run() are the real code; the workload module is a stand-in
# that says it was reached (no framework is imported).

class ReachedTheWorkload(Exception):
    pass


def fake_torch(monkeypatch, capability: tuple[int, int] | None) -> None:
    """torch with one CUDA GPU of `capability` (None: no GPU)."""
    import sys
    from types import SimpleNamespace

    cuda = SimpleNamespace(is_available=lambda: capability is not None, device_count=lambda: 1,
                           get_device_capability=lambda device=None: capability,
                           reset_peak_memory_stats=lambda device=None: None)
    flags = SimpleNamespace(allow_tf32=False)
    torch = SimpleNamespace(cuda=cuda, set_num_threads=lambda n: None, get_num_threads=lambda: 1,
                            set_float32_matmul_precision=lambda p: None,
                            backends=SimpleNamespace(cuda=SimpleNamespace(matmul=flags), cudnn=flags))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.delenv("LOCAL_RANK", raising=False)


@pytest.fixture
def stand_in_workload(tmp_path, monkeypatch):
    """Shared data for tiny bert-predict, and a native-torch BERT module that raises ReachedTheWorkload when built."""
    import sys
    from types import SimpleNamespace

    from fwbench.core import data

    data.generate(tmp_path / "data", "tiny", 0, ["bert-predict"])

    def build(ctx):
        raise ReachedTheWorkload(ctx.spec.precision)

    monkeypatch.setitem(sys.modules, "fwbench.workloads.torch.bert", SimpleNamespace(build=build, CELLS=()))
    return CellSpec("native-torch", "bert-predict", "tiny", "none", str(tmp_path / "data"), 2)


@pytest.mark.parametrize("capability, has_tf32", [(None, False), ((7, 0), False), ((7, 5), False), ((8, 0), True),
                                                  ((9, 0), True)])
def test_tf32_on_a_device_without_it_is_unsupported_not_a_float32_row(monkeypatch, stand_in_workload, capability,
                                                                       has_tf32):
    """A CPU, a V100 (7.0), a T4 (7.5): unsupported with the reason; an A100 (8.0) or H100 (9.0) runs tf32. fp32 runs
    everywhere."""
    from fwbench.harness import cell
    from fwbench.workloads import Unsupported

    fake_torch(monkeypatch, capability)
    tf32 = replace(stand_in_workload, precision="tf32")
    if has_tf32:
        with pytest.raises(ReachedTheWorkload):
            cell.build_cell(tf32, cell.PhaseTimer())
    else:
        with pytest.raises(Unsupported, match=r"^--precision tf32: this device has no TF32 .* not tf32$"):
            cell.build_cell(tf32, cell.PhaseTimer())
    with pytest.raises(ReachedTheWorkload):
        cell.build_cell(replace(stand_in_workload, precision="fp32"), cell.PhaseTimer())


def test_tf32_on_a_cpu_is_an_unsupported_row_like_fp16_on_a_cpu_trainer(tmp_path, monkeypatch, stand_in_workload):
    """The row the cell process writes (`--tf32 on` is the same precision): unsupported, exit 0, the reason."""
    import json

    from fwbench.harness import cell

    fake_torch(monkeypatch, None)
    record = tmp_path / "record.json"
    assert cell.run(replace(stand_in_workload, precision=precision.from_tf32("on")), record) == 0
    row = json.loads(record.read_text())
    assert row["status"] == "unsupported" and row["precision"] == "tf32" and row["tf32_setting"] == "on"
    assert "this device has no TF32" in row["error_message"] and row["error_type"] == "Unsupported"


def test_every_backend_says_whether_its_device_has_tf32():
    """JAX's device objects and TensorFlow's device details stand in for the GPU (compute capability)."""
    from types import SimpleNamespace

    from fwbench.harness.backends import JaxBackend, TensorFlowBackend

    def jax(platform, capability):
        backend = object.__new__(JaxBackend)
        backend.devices = [SimpleNamespace(platform=platform, compute_capability=capability)]
        backend.on_gpu = platform == "gpu"
        return backend.tf32_available()

    assert [jax("cpu", None), jax("gpu", "7.0"), jax("gpu", "8.0"), jax("gpu", "9.0")] == [False, False, True, True]

    def tensorflow(capability):
        backend = object.__new__(TensorFlowBackend)
        backend.gpus = [] if capability is None else ["/physical_device:GPU:0"]
        backend.on_gpu = bool(backend.gpus)
        details = {"compute_capability": capability}
        backend.tf = SimpleNamespace(config=SimpleNamespace(experimental=SimpleNamespace(
            get_device_details=lambda gpu: details)))
        return backend.tf32_available()

    assert [tensorflow(None), tensorflow((7, 5)), tensorflow((8, 6))] == [False, False, True]
