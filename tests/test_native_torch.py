"""native-torch at the tiny preset, in its real environment (integration)."""

from __future__ import annotations

import duckdb
import pyarrow.parquet as pq
import pytest

from fwbench.core import data, registry, results
from fwbench.core.schema import COLUMN_NAMES
from tests.conftest import locked_version, run_fwbench

pytestmark = pytest.mark.integration

# Compiled cells are slow on the CPU (cold Inductor compiles); these three cover a Trainer-free
# forward, a module assigned into a parent (SAM) and generate() through a compiled forward.
COMPILED_TASKS = ["bert-predict", "sam-predict", "gemma-generate-bs1"]


@pytest.fixture(scope="module")
def eager_results(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("native-eager")
    # A private temporary directory, to see what the cells leave behind in it. One thread a cell: beside the other
    # test worker, a thread pool on every core spends the machine spinning in OpenMP's barriers.
    done = run_fwbench("run", "--stack", "native-torch", "--preset", "tiny", "--threads", "1", "--out", str(out),
                       "--data", str(shared_data), env={"TMPDIR": str(tmp_path_factory.mktemp("native-tmp"))})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_trainer_fits_leave_no_temporary_directory(eager_results, tmp_path_factory):
    tmp = tmp_path_factory.getbasetemp() / "native-tmp0"
    assert tmp.is_dir() and not list(tmp.glob("fwbench-trainer-*"))


def rows(out):
    return [results.read_row(p) for p in sorted(out.rglob("*.parquet"))]


def test_all_twelve_tasks_ok(eager_results, shared_data):
    got = rows(eager_results)
    assert sorted(r["task"] for r in got) == sorted(registry.TASKS)
    for row in got:
        assert row["status"] == "ok", (row["task"], row["error_message"])
        assert row["ms_per_step"] > 0 and len(row["step_ms"]) == row["timed_steps"] == registry.PRESETS["tiny"].steps
        assert row["first_step_s"] > 0 and row["setup_s"] > 0
        assert row["peak_mem_bytes"] > 0 and row["peak_mem_kind"] == "process_peak_rss"
        # The locked torch (a CPU wheel may add a local suffix such as +cpu).
        assert row["framework_version"].split("+")[0] == locked_version("native-torch")
        assert row["threads"] >= 1 and row["device"] == "cpu"
        assert row["compiled_graphs"] == 0 and row["compile_took_effect"] is None
        _arrays, digest, _seed = data.load(shared_data, "tiny", row["task"])
        assert row["input_sha256"] == digest


def test_generation_yields_exactly_the_requested_tokens(eager_results):
    for row in rows(eager_results):
        if row["task_kind"] == "generate":
            shapes = registry.workload(row["task"], "tiny").shapes
            assert row["tokens_generated"] == shapes.new_tokens
            assert row["prompt_len"] == shapes.prompt_len


def test_lora_trains_only_adapters(eager_results):
    for row in rows(eager_results):
        if row["model"] in ("gemma", "mistral") and row["task_kind"] == "fit":
            assert 0 < row["params_trainable"] < row["params_total"] / 10
            assert row["dtype"] == "bfloat16"


def test_schema_and_duckdb_read_as_is(eager_results):
    files = sorted(eager_results.rglob("*.parquet"))
    assert pq.read_table(files[0]).schema.names == list(COLUMN_NAMES)
    [(count, ok)] = duckdb.sql(
        f"SELECT count(*), count(*) FILTER (WHERE status = 'ok') FROM '{eager_results}/**/*.parquet'").fetchall()
    assert count == ok == 12


@pytest.mark.compiled
def test_compiled_variant_really_compiles(tmp_path, shared_data):
    args = [a for t in COMPILED_TASKS for a in ("--task", t)]
    done = run_fwbench("run", "--stack", "native-torch", "--preset", "tiny", "--compile", "reduce-overhead",
                       *args, "--steps", "3", "--out", str(tmp_path), "--data", str(shared_data))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = rows(tmp_path)
    assert len(got) == len(COMPILED_TASKS)
    for row in got:
        assert row["status"] == "ok", (row["task"], row["error_message"])
        assert row["compile_mode"] == "reduce-overhead"
        assert row["compiled_graphs"] > 0
        assert row["cudagraph_skips"] > 0  # CUDA graphs cannot apply on the CPU: recorded, not hidden
        # reduce-overhead means CUDA graphs: none replayed on the CPU, so the compile did not take effect.
        assert row["cudagraph_replays"] == 0 and row["compile_took_effect"] is False


def test_the_7b_models_are_created_on_the_device_in_bfloat16():
    """The causal LMs are built where they run, in bfloat16, not in fp32 on the host and then cast (34 GB of host
    memory and minutes of CPU initialisation per 7B cell). Checked in native-torch's environment: every parameter
    the model's __init__ creates is already bfloat16 on the build device (here the CPU, the device it is given)."""
    import subprocess

    probe = """
import torch
from transformers import GemmaConfig, GemmaForCausalLM
from fwbench.workloads.torch.causal_lm import created_on
seen = []
class Recording(GemmaForCausalLM):
    def __init__(self, config):
        super().__init__(config)
        seen.extend({(p.dtype, p.device.type) for p in self.parameters()})
        seen.append(("default", torch.get_default_dtype()))
config = GemmaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                     head_dim=16, intermediate_size=64)
with created_on("cpu", torch.bfloat16):
    Recording(config)
print(sorted(map(str, set(seen))), torch.get_default_dtype())
"""
    assert run_fwbench("env", "build", "native-torch").returncode == 0
    python = run_fwbench("env", "path", "native-torch").stdout.strip()
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(registry.__file__).rsplit("/fwbench/", 1)[0], "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("]")[0] + "]" == str(sorted(["(torch.bfloat16, 'cpu')", "('default', torch.bfloat16)"]))
    assert done.stdout.strip().endswith("torch.float32")  # the default is restored afterwards
