"""The four Keras stacks at the tiny preset, each in its real environment (integration).

All four `fwbench run` invocations start together (each builds its environment on first use): on a
2-core machine most of a cell is single-threaded XLA compilation and imports, so overlapping them
roughly halves the wall time. Each cell runs on one thread (`--threads 1`): four cells, each with a thread
pool on every core, would spend the machine spinning in each other's barriers. The tests check statuses
and provenance, not speed. Every stack runs BERT's fit and predict; one stack a run, by rotation (tests/rotation.py),
runs half of the other tasks as well, the half by rotation too (every stack runs one half before the other comes
up: eight commits cover every pair): each half has a SAM, a Stable Diffusion, an LLM fit and an LLM generate task,
of both LLMs between them. The two `-bs1` generate tasks are the `-bs32` tasks' code at batch 1 and never run here
(CI time; tests/test_docker_e2e.py runs all twelve on keras3-jax, in its image).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fwbench.core import data, registry, results
from tests.conftest import locked_version
from tests.rotation import rotated, rotated_part, skip_reason

pytestmark = pytest.mark.integration

KERAS_STACKS = [s for s in registry.REPORT_ORDER if registry.STACKS[s].keras_version is not None]
KERAS3_STACKS = [s for s in KERAS_STACKS if registry.STACKS[s].keras_version == 3]
KERAS2_UNSUPPORTED = {"gemma-fit", "gemma-generate-bs32", "gemma-generate-bs1",
                      "mistral-fit", "mistral-generate-bs32", "mistral-generate-bs1"}
RUN_TASKS = [task for task in registry.TASKS if not task.endswith("-bs1")]
BERT_TASKS = ["bert-fit", "bert-predict"]
# The rest of RUN_TASKS in two halves: SAM, Stable Diffusion, an LLM fit and the other LLM's generate in each.
OTHER_TASK_HALVES = (("sam-fit", "stable_diffusion-predict", "gemma-fit", "mistral-generate-bs32"),
                     ("sam-predict", "stable_diffusion-fit", "mistral-fit", "gemma-generate-bs32"))
# The stack that runs more than BERT this run, and what it runs.
FULL_MATRIX = rotated(KERAS_STACKS, per_run=1)
MATRIX_TASKS = [task for task in RUN_TASKS if task in BERT_TASKS
                or task in rotated_part(OTHER_TASK_HALVES, turn=len(KERAS_STACKS))]


def tasks_of(stack: str) -> list[str]:
    return MATRIX_TASKS if stack in FULL_MATRIX else BERT_TASKS


def test_the_keras_stacks_are_the_four_published_ones():
    assert KERAS_STACKS == ["keras3-tensorflow", "keras3-jax", "keras3-torch", "keras2-tensorflow"]


@pytest.fixture(scope="module")
def stack_results(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("keras-stacks")
    processes = {}
    for stack in KERAS_STACKS:
        log = open(out / f"{stack}.log", "w")
        processes[stack] = (subprocess.Popen(
            [sys.executable, "-m", "fwbench.cli", "run", "--stack", stack, "--preset", "tiny", "--threads", "1",
             *[a for task in tasks_of(stack) for a in ("--task", task)], "--out", str(out / stack),
             "--data", str(shared_data)],
            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ)), log)
    codes = {}
    for stack, (process, log) in processes.items():
        codes[stack] = process.wait(timeout=3600)
        log.close()
    return out, codes


def rows(out, stack):
    return {row["task"]: row for row in (results.read_row(p) for p in sorted((out / stack).rglob("*.parquet")))}


@pytest.mark.parametrize("stack", KERAS_STACKS)
def test_every_task_has_a_row_with_the_expected_status(stack, stack_results, shared_data):
    out, codes = stack_results
    log = (out / f"{stack}.log").read_text()[-3000:]
    got = rows(out, stack)
    assert sorted(got) == sorted(tasks_of(stack)), log
    for task, row in got.items():
        expected = "unsupported" if stack == "keras2-tensorflow" and task in KERAS2_UNSUPPORTED else "ok"
        assert row["status"] == expected, (task, row["status"], row["error_message"], log)
        if expected == "unsupported":
            assert row["error_message"] and "Keras" in row["error_message"]
            continue
        assert row["ms_per_step"] > 0 and len(row["step_ms"]) == row["timed_steps"] == registry.PRESETS["tiny"].steps
        assert row["first_step_s"] > 0 and row["setup_s"] > 0
        assert row["peak_mem_bytes"] > 0 and row["peak_mem_kind"] == "process_peak_rss"
        # As published, per task (Keras 2: no XLA for SAM predict and SD fit), from the stack definition.
        assert row["jit_compile"] is registry.get_stack(stack).jit_compile(task)
        assert row["jit_compile"] is (stack != "keras3-torch" and not (
            stack == "keras2-tensorflow" and task in ("sam-predict", "stable_diffusion-fit")))
        assert row["family"] == "keras" and row["device"] == "cpu" and row["threads"] >= 1
        # What the process ran under beside the identity: the runner's thread variables, Python's collector as is.
        settings = json.loads(row["extra"])["process_settings"]
        assert settings["thread_variables"] == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                                                "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
        assert settings["gc"]["enabled"] is True and settings["gc"]["frozen_objects"] == 0
        switches = json.loads(row["extra"])["context_switches"]  # the window's: a step's sync waits at least once
        assert set(switches) == {"involuntary", "voluntary"} and switches["involuntary"] >= 0
        assert switches["voluntary"] + switches["involuntary"] >= 1
        # Same bytes as every other stack (native-torch included) read for this task.
        _arrays, digest, _seed = data.load(shared_data, "tiny", task)
        assert row["input_sha256"] == digest
    assert codes[stack] == 0, log


@pytest.mark.parametrize("stack", KERAS3_STACKS)
def test_keras3_llm_rows(stack, stack_results):
    if stack not in FULL_MATRIX:
        pytest.skip(skip_reason(stack, FULL_MATRIX))
    out, _codes = stack_results
    ran = {(row["model"], row["task_kind"]) for row in rows(out, stack).values()}
    assert ran >= {("gemma", "fit"), ("mistral", "generate")} or ran >= {("mistral", "fit"), ("gemma", "generate")}
    for task, row in rows(out, stack).items():
        if row["model"] not in ("gemma", "mistral"):
            continue
        assert row["dtype"] == "bfloat16"
        if row["task_kind"] == "generate":
            shapes = registry.workload(task, "tiny").shapes
            assert row["tokens_generated"] == shapes.new_tokens
            assert row["prompt_len"] == shapes.prompt_len
        else:  # rank-4 LoRA: only the adapters train
            assert 0 < row["params_trainable"] < row["params_total"] / 10


def test_backend_switches_are_recorded(stack_results):
    out, _codes = stack_results
    expected = {"keras3-tensorflow": "tensorflow", "keras3-jax": "jax", "keras3-torch": "torch",
                "keras2-tensorflow": None}
    for stack, backend in expected.items():
        row = rows(out, stack)["bert-predict"]
        environment = json.loads(row["extra"])["keras_environment"]
        assert environment["KERAS_BACKEND"] == backend
        assert environment["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
        assert (environment["TF_USE_LEGACY_KERAS"] == "1") is (stack == "keras2-tensorflow")
        assert row["framework_version"].split("+")[0] == locked_version(stack)
        # TensorFlow only feeds the data of the JAX and PyTorch backends: on a GPU host it is given no GPU, so it can
        # hold no CUDA context or memory beside theirs; a CPU cell has none to hide (CUDA_VISIBLE_DEVICES empty).
        hidden = json.loads(row["extra"]).get("tensorflow_gpus")
        assert hidden == ("none visible" if backend in ("jax", "torch") else None), (stack, hidden)


def test_keras3_torch_checksums_the_bytes_numpy_would_give(stack_results):
    """keras3-torch's initial-weights checksum reads each variable's torch tensor (Keras's own NumPy conversion takes
    every bfloat16 tensor to float32 and back: twice native-torch's checksum time on the H200); the dtype names,
    shapes and bytes, so the digest, are those np.asarray gives, in the real keras3-torch environment, and read piece
    by piece as from a GPU (DeviceBytes) they give the same digest."""
    from fwbench.engines.local import StackEnvironment

    environment = StackEnvironment("keras3-torch")
    assert environment.ready, "the keras3-torch environment was built by stack_results"
    snippet = """
import numpy as np, keras
from fwbench.workloads import weights_sha256
from fwbench.workloads.keras import common
keras.config.set_dtype_policy("bfloat16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.BatchNormalization(),
                          keras.layers.Dense(4, dtype="float32")])
optimizer = keras.optimizers.AdamW()
optimizer.build(model.trainable_variables)
extra = [keras.Variable(np.arange(3), dtype=d, trainable=False) for d in ("int64", "uint32", "bool", "uint8")]
class Weights:
    weights = model.weights + optimizer.variables + extra
as_numpy = [(str(a.dtype), a.shape, np.ascontiguousarray(a).view(np.uint8))
            for a in (np.asarray(w) for w in Weights.weights)]
fast = list(common.weight_bytes(Weights))
assert [(n, s) for n, s, _ in fast] == [(n, s) for n, s, _ in as_numpy]
assert weights_sha256(iter(fast)) == weights_sha256(iter(as_numpy))
# a weight on a GPU is read back piece by piece (DeviceBytes): the same digest (a CPU tensor stands in here)
import torch
from fwbench.workloads.torch.common import DeviceBytes
as_read = [(n, s, DeviceBytes(torch.from_numpy(b.reshape(-1)))) for n, s, b in as_numpy]
assert weights_sha256(iter(as_read), workers=3) == weights_sha256(iter(as_numpy), workers=1)
print("same", len(fast))
"""
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "runner")}
    done = subprocess.run([str(environment.python), "-c", snippet], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("same "), done.stderr[-2000:]
