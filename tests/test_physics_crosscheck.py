"""The analytic FLOP counts (fwbench.core.physics) against the frameworks' own counters at `tiny` (integration):
torch's FlopCounterMode in the native-torch environment, XLA's cost analysis in the keras3-jax environment.
The probes run in the real stack environments (the test interpreter has no frameworks); a last test checks
the physics columns on rows of a real CPU run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fwbench.core.spec import CellSpec
from fwbench.engines import cell_environment
from fwbench.engines.local import StackEnvironment, with_this_checkout

pytestmark = pytest.mark.integration

TOLERANCE = 0.10


def run_probe(stack: str, probe: str) -> dict:
    environment = StackEnvironment(stack)
    environment.build()
    spec = CellSpec(stack=stack, task="bert-predict", preset="tiny", compile_mode="none", data_dir="", steps=1,
                    threads=os.cpu_count() or 1)
    done = subprocess.run([str(environment.python), str(Path(__file__).with_name(probe))], capture_output=True,
                          text=True, timeout=900, env=with_this_checkout(cell_environment(spec)))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_analytic_flops_match_torch_flop_counter():
    counts = run_probe("native-torch", "physics_flops_probe_torch.py")
    assert set(counts) == {"bert forward", "gemma forward", "mistral forward", "sam image encoder", "sd unet",
                           "sd vae encoder"}
    for name, (counted, analytic) in counts.items():
        assert counted > 0 and abs(analytic / counted - 1) <= TOLERANCE, (name, counted, analytic)


def test_analytic_flops_match_xla_cost_analysis():
    counts = run_probe("keras3-jax", "physics_flops_probe_jax.py")
    assert set(counts) == {"bert forward", "gemma forward"}
    for name, (counted, analytic) in counts.items():
        assert counted > 0 and abs(analytic / counted - 1) <= TOLERANCE, (name, counted, analytic)


def test_cpu_rows_carry_the_physics_columns(tmp_path, shared_data):
    """A real run (native-torch, tiny, the local engine): every row has its FLOPs, the run's one measured CPU
    ceiling, % of peak and no energy columns (CPU)."""
    from fwbench.core import physics, results
    from tests.conftest import run_fwbench

    out = tmp_path / "out"
    done = run_fwbench("run", "--stack", "native-torch", "--task", "bert-predict", "--task", "gemma-generate-bs1",
                       "--preset", "tiny", "--out", str(out), "--data", str(shared_data))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [results.read_row(p) for p in sorted(out.rglob("*.parquet"))]
    assert len(rows) == 2
    for row in rows:
        assert row["status"] == "ok", row["error_message"]
        cost = physics.step_cost(row["model"], row["task_kind"], "tiny", row["batch_size"])
        assert row["model_flops_per_step"] == cost.flops and row["flops_convention"] == cost.convention
        assert row["achieved_tflops"] == pytest.approx(cost.flops / row["ms_per_step"] * 1e3 / 1e12)
        # Each against the ceiling of the precision it ran at, measured once per run: fp32 (NumPy) for BERT,
        # bf16 through torch for the bfloat16 LLM.
        if row["compute_precision"] == "fp32":
            assert row["peak_source"].startswith("measured fp32 GEMM"), row["peak_source"]
        else:  # the framework's bf16 GEMM, or the fp32 one where that probe was slower (no native bf16 here)
            assert (row["peak_source"].startswith("measured bf16 GEMM")
                    or "standing in for bf16" in row["peak_source"]), row["peak_source"]
        assert row["peak_tflops"] > 0
        assert row["pct_of_peak"] == pytest.approx(100 * row["achieved_tflops"] / row["peak_tflops"])
        assert row["precision_suspect"] is False and row["energy_status"] is None
    generate = next(r for r in rows if r["task_kind"] == "generate")
    assert generate["compute_precision"] == "bf16" and generate["bytes_per_step"] > 0
    assert generate["pct_of_bandwidth"] is None  # no memory bandwidth figure for a CPU
