"""`fwbench run --model`: the example model files on Keras 3 stacks and their PyTorch twins on native-torch, in the
real environments, at small batches and few steps (integration); and bad model files, one row per backend.

One fixture run serves every assertion: keras3-jax and one other Keras 3 stack by rotation (tests/rotation.py; CI
time) run the examples in their own `fwbench run` processes, at once (most of a cell is single-threaded imports and
XLA compilation on a 2-core machine), then native-torch runs the twins, so that they are checked against the Keras
models' parameter counts. Every run shares one data folder: the first cell of a file makes its inputs, the others read
those bytes. One task kind per example (CI time): the fit path is the Transformer's (compiling MobileNetV2's training
step with XLA takes minutes on a small CPU), the predict path the MLP's and MobileNetV2's; tests/test_model_files.py
checks that every example defines the whole contract (fit included).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fwbench.core import registry, results
from tests.conftest import REPO_ROOT, run_fwbench
from tests.rotation import rotated

pytestmark = pytest.mark.integration

KERAS3 = [s for s in registry.REPORT_ORDER if registry.STACKS[s].keras_version == 3]
# The examples run on keras3-jax every run and on one other Keras 3 backend by rotation (CI time; tests/rotation.py).
KERAS3_RUN = rotated(KERAS3, always=("keras3-jax",), per_run=1)
NATIVE = [s for s in registry.REPORT_ORDER if registry.STACKS[s].family == "torch"]
EXAMPLES = REPO_ROOT / "examples"
SMALL = ["--batch", "2", "--steps", "2", "--warmup", "1", "--threads", "1"]
# (example, the kinds it runs here)
RUNS = [("mlp.py", ["predict"]), ("transformer_classifier.py", ["fit"]), ("mobilenet_v2.py", ["predict"])]


def commands(stack: str, out: Path, data: Path) -> list[list[str]]:
    found = []
    for example, kinds in RUNS:
        compile_modes = []  # a compiled twin is a native-torch --compile cell like any (tests/test_native_torch.py)
        found.append([sys.executable, "-m", "fwbench.cli", "run", "--model", str(EXAMPLES / example),
                      "--stack", stack, *[arg for kind in kinds for arg in ("--task", kind)], *compile_modes, *SMALL,
                      "--out", str(out), "--data", str(data)])
    return found


def run_all(stacks: list[str], out: Path, data: Path) -> dict[str, tuple[list[int], str]]:
    """Each stack's commands one after the other, the stacks at once; (exit codes, output) per stack."""
    chains = {}
    for stack in stacks:
        log = out / f"{stack}.log"
        script = " ; ".join(" ".join(f"'{a}'" for a in command) + " >> '" + str(log) + "' 2>&1; echo rc=$? >> '"
                            + str(log) + "'" for command in commands(stack, out / stack, data))
        chains[stack] = subprocess.Popen(["bash", "-c", script], env=dict(os.environ))
    found = {}
    for stack, process in chains.items():
        process.wait(timeout=3600)
        text = (out / f"{stack}.log").read_text()
        found[stack] = ([int(line[3:]) for line in text.splitlines() if line.startswith("rc=")], text)
    return found


@pytest.fixture(scope="module")
def examples_run(tmp_path_factory):
    out, data = tmp_path_factory.mktemp("model-files"), tmp_path_factory.mktemp("model-files-data")
    logs = run_all(KERAS3_RUN, out, data)
    logs.update(run_all(NATIVE, out, data))  # after the Keras models: the twins are checked against them
    return out, data, logs


def rows(out: Path) -> list[dict]:
    return [results.read_row(path) for path in sorted(out.rglob("*.parquet"))]


def test_every_example_runs_ok_on_every_stack_with_no_traceback(examples_run):
    out, _, logs = examples_run
    for stack, (codes, text) in logs.items():
        assert codes == [0] * len(RUNS), text[-3000:]
        assert "Traceback" not in text
    got = rows(out)
    cells = {(r["stack"], r["task"], r["compile_mode"]) for r in got}
    expected = {(stack, f"{example.removesuffix('.py')}.py-{kind}-bs2", mode)
                for example, kinds in RUNS for kind in kinds for stack in KERAS3_RUN + NATIVE
                for mode in [registry.STACKS[stack].compile_modes[0]]}
    assert cells == expected
    for row in got:
        assert row["status"] == "ok", (row["stack"], row["task"], row["error_message"])
        assert row["ms_per_step"] > 0 and len(row["step_ms"]) == row["timed_steps"] == 2
        assert row["first_step_s"] > 0 and row["batch_size"] == 2 and row["device"] == "cpu"
        assert row["model"] == row["task"].split("-")[0] and len(row["model_sha256"]) == 64
        # As each stack's policy says (--jit published): XLA on TensorFlow and JAX, eager on PyTorch.
        assert row["jit_compile"] is registry.get_stack(row["stack"]).jit_compile(row["task"])


def test_every_backend_reads_the_same_inputs_and_counts_the_same_model(examples_run):
    out, data, _ = examples_run
    by_file: dict[str, list[dict]] = {}
    for row in rows(out):
        by_file.setdefault(row["model"], []).append(row)
    assert set(by_file) == {example for example, _ in RUNS}
    for model, found in by_file.items():
        assert len({r["model_sha256"] for r in found}) == 1
        assert len({r["input_sha256"] for r in found}) == 1, model  # written once, read by every backend
        assert len({r["params_trainable"] for r in found}) == 1, model  # the twin is the Keras model's size
        for kind in {r["task_kind"] for r in found}:
            flops = {r["model_flops_per_step"] for r in found if r["task_kind"] == kind}
            assert len(flops) == 1 and None not in flops, (model, kind, flops)  # counted alike on every backend
    inputs = list((data / "model-files").glob("*/bs2-seed0/manifest.json"))
    assert len(inputs) == len(RUNS)
    twins = [r for r in rows(out) if r["stack"] in NATIVE]
    assert twins and all(r["twin_params_match"] is True and r["twin_params_keras"] == r["params_trainable"]
                         for r in twins)


def test_a_model_files_fit_runs_data_parallel_where_the_stack_has_data_parallelism(examples_run, tmp_path):
    """--devices 2: keras3-jax splits the global batch over two CPU devices (keras.distribution.DataParallel), the
    twin trains in two DistributedDataParallel ranks; keras3-torch, which has no data parallelism, says so (its
    reason is checked in tests/test_scaling.py; here that its row is written and the other stacks still run)."""
    _, data, _ = examples_run
    out = tmp_path / "data-parallel"
    done = run_fwbench("run", "--model", str(EXAMPLES / "mlp.py"), "--task", "fit", "--devices", "2",
                       "--stack", "keras3-jax", "--stack", "keras3-torch", "--stack", "native-torch", *SMALL,
                       "--out", str(out), "--data", str(data))
    assert "Traceback" not in done.stdout + done.stderr, (done.stdout + done.stderr)[-3000:]
    by_stack = {row["stack"]: row for row in rows(out)}
    assert set(by_stack) == {"keras3-jax", "keras3-torch", "native-torch"}
    for stack, comm, how in (("keras3-jax", "xla-collectives", "keras.distribution.DataParallel"),
                             ("native-torch", "gloo", "2 ranks")):
        row = by_stack[stack]
        assert row["status"] == "ok", (stack, row["error_message"])
        assert (row["devices"], row["per_device_batch"], row["global_batch"], row["batch_size"]) == (2, 2, 4, 4)
        extra = json.loads(row["extra"])
        assert row["comm_backend"] == comm and how in extra["data_parallel"], (stack, extra)
        assert extra["physics"].startswith("not computed for data-parallel rows")
        assert row["model_flops_per_step"] is None
    assert by_stack["native-torch"]["twin_params_match"] is True
    assert by_stack["keras3-torch"]["status"] == "unsupported"
    assert "keras.distribution is implemented for the JAX and TensorFlow backends only" in \
        by_stack["keras3-torch"]["error_message"]


def test_steps_per_execution_runs_n_steps_a_call_where_keras_can_and_the_report_keeps_the_twin_beside(
        examples_run, tmp_path):
    """--steps-per-execution 2: keras3-jax's predict calls its compiled step once per 2 steps (the clock times the
    calls); Keras on PyTorch refuses steps_per_execution > 1, an unsupported row in Keras's words; the twin runs one
    step a call, and the report ranks it beside the Keras cells."""
    _, data, _ = examples_run
    out = tmp_path / "per-call"
    done = run_fwbench("run", "--model", str(EXAMPLES / "mlp.py"), "--task", "predict", "--stack", "keras3-jax",
                       "--stack", "keras3-torch", "--stack", "native-torch", "--batch", "2", "--steps", "4",
                       "--warmup", "1", "--threads", "1", "--steps-per-execution", "2", "--out", str(out),
                       "--data", str(data))
    assert "Traceback" not in done.stdout + done.stderr, (done.stdout + done.stderr)[-3000:]
    by_stack = {row["stack"]: row for row in rows(out)}
    jax, torch_backend, twin = by_stack["keras3-jax"], by_stack["keras3-torch"], by_stack["native-torch"]
    assert jax["status"] == "ok" and jax["steps_per_execution"] == 2, jax["error_message"]
    assert jax["timed_steps"] == 4 and len(jax["step_ms"]) == 2  # two calls of two steps
    assert torch_backend["status"] == "unsupported" and "steps_per_execution" in torch_backend["error_message"]
    assert twin["status"] == "ok" and twin["steps_per_execution"] == 1 and len(twin["step_ms"]) == 4
    report = tmp_path / "report"
    assert run_fwbench("aggregate", str(out), "-o", str(report), "--include-busy").returncode == 0
    table = report.joinpath("report.md").read_text().split("### mlp.py: predict, batch 2", 1)[1].split("###", 1)[0]
    assert "keras3-jax (XLA, 2 steps/execution)" in table and "native-torch (eager)" in table


def test_the_report_ranks_the_backends_of_each_model(examples_run, tmp_path):
    """Every backend is in its model's table; the judge ranks those with quiet rows (busy rows never decide, even
    with --include-busy, which only shows their numbers), and its sentence says what it can claim."""
    out, _, _ = examples_run
    done = run_fwbench("aggregate", *[str(out / stack) for stack in KERAS3_RUN + NATIVE], "-o", str(tmp_path),
                       "--include-busy")
    assert done.returncode == 0, done.stderr[-2000:]
    report = (tmp_path / "report.md").read_text()
    section = report.split("## Your models", 1)[1].split("\n## ", 1)[0]
    quiet_backends: dict[str, set] = {}
    for row in rows(out):
        if row["status"] == "ok" and not row["busy"]:
            quiet_backends.setdefault(row["task"], set()).add(row["stack"])
    for example, kinds in RUNS:
        for kind in kinds:
            table = section.split(f"### {example}: {kind}, batch 2", 1)[1].split("###", 1)[0]
            quiet = len(quiet_backends.get(f"{example.removesuffix('.py')}.py-{kind}-bs2", ()))
            expected = ("No backend ran ok on a quiet machine",) if quiet == 0 else ("Only ",) if quiet == 1 else (
                "Fastest: ", "Cannot rank: ", "Tie: ")  # the judge's
            assert any(verdict in table for verdict in expected), table
            ranks = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ") and
                     line.split("|")[1].strip().isdigit()]
            assert ranks == [str(rank) for rank in range(1, quiet + 1)], table
            listed = [line for line in table.splitlines() if line.startswith("| ") and "(" in line.split("|")[2]]
            assert len(listed) == len(KERAS3_RUN) + 1, table  # Keras 3 backends and the twin, ranked or not
    assert "## Preset tiny" not in report  # model-file rows stay out of the published cells' tables


BAD_FILES = {
    "syntax_error.py": "def build_model(:\n    pass\n",
    "no_inputs.py": "def build_model():\n    import keras\n    return keras.Sequential([keras.Input((3,)), "
                    "keras.layers.Dense(2)])\n",
    "wrong_shape.py": "def build_model():\n    import keras\n    return keras.Sequential([keras.Input((3,)), "
                      "keras.layers.Dense(2)])\n\n\ndef make_inputs(batch_size, rng):\n"
                      "    return rng.standard_normal((batch_size + 1, 3)), rng.integers(0, 2, batch_size)\n",
    # Stands in for a model one backend cannot build (an op it lacks, a layer it refuses).
    "not_on_tensorflow.py": "def build_model():\n    import keras\n    if keras.backend.backend() == 'tensorflow':\n"
                            "        raise NotImplementedError('this model uses an op TensorFlow lacks')\n"
                            "    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])\n\n\n"
                            "def make_inputs(batch_size, rng):\n"
                            "    return rng.standard_normal((batch_size, 3), dtype='float32'), "
                            "rng.integers(0, 2, batch_size)\n",
}
JAX, TENSORFLOW = (next(s for s in KERAS3 if registry.STACKS[s].keras_backend == b) for b in ("jax", "tensorflow"))


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory):
    folder, out = tmp_path_factory.mktemp("bad-files"), tmp_path_factory.mktemp("bad-out")
    done = {}
    for name, text in BAD_FILES.items():
        (folder / name).write_text(text)
        stacks = [JAX, TENSORFLOW] if name == "not_on_tensorflow.py" else [JAX]
        done[name] = run_fwbench("run", "--model", str(folder / name), *[a for s in stacks for a in ("--stack", s)],
                                 "--task", "predict", *SMALL, "--out", str(out / name), "--data", str(out / "data"))
    return out, done


def bad_rows(out: Path, name: str) -> dict[str, dict]:
    return {row["stack"]: row for row in rows(out / name)}


@pytest.mark.parametrize("name, first_line", [
    ("syntax_error.py", "syntax_error.py does not import on keras3-jax: SyntaxError: invalid syntax "
                        "(syntax_error.py line 1)"),
    ("no_inputs.py", "no_inputs.py defines no make_inputs()"),
    ("wrong_shape.py", "make_inputs(2, rng): x has shape (3, 3), whose first axis is not the batch size 2"),
])
def test_a_bad_model_file_is_an_error_row_with_its_first_line_and_no_traceback(bad_runs, name, first_line):
    out, done = bad_runs
    assert done[name].returncode == 1
    assert "Traceback" not in done[name].stdout + done[name].stderr
    (row,) = bad_rows(out, name).values()
    assert row["status"] == "error" and row["error_type"] == "ModelFileError"
    assert first_line in row["error_message"].splitlines()[0], row["error_message"]
    assert first_line[:60] in done[name].stdout  # the CLI's line for the cell says it


def test_a_model_one_backend_cannot_build_fails_there_only(bad_runs):
    out, done = bad_runs
    found = bad_rows(out, "not_on_tensorflow.py")
    assert found[JAX]["status"] == "ok"
    assert found[TENSORFLOW]["status"] == "error"
    assert found[TENSORFLOW]["error_message"].splitlines()[0] == (
        "not_on_tensorflow.py: build_model() failed on keras3-tensorflow: NotImplementedError: this model uses an op "
        "TensorFlow lacks (not_on_tensorflow.py line 4)")
    assert "Traceback" not in done["not_on_tensorflow.py"].stdout + done["not_on_tensorflow.py"].stderr
    assert json.loads(found[TENSORFLOW]["extra"])["traceback"]  # the whole story stays on the row
