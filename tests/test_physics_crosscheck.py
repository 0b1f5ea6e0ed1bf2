"""The analytic FLOP counts (fwbench.core.physics) against the frameworks' own counters at `tiny` (integration):
torch's FlopCounterMode in the native-torch environment, XLA's cost analysis in the keras3-jax environment.
The probes run in the real stack environments (the test interpreter has no frameworks)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fwbench.core.spec import CellSpec
from fwbench.engines import cell_environment
from fwbench.engines.local import StackEnvironment

pytestmark = pytest.mark.integration

TOLERANCE = 0.10
RUNNER = Path(__file__).resolve().parents[1] / "runner"


def run_probe(stack: str, probe: str) -> dict:
    environment = StackEnvironment(stack)
    environment.build()
    spec = CellSpec(stack=stack, task="bert-predict", preset="tiny", compile_mode="none", data_dir="", steps=1,
                    threads=os.cpu_count() or 1)
    env = cell_environment(spec)
    # The environments are shared by every checkout: this checkout's fwbench first (as the local engine does).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(RUNNER), env.get("PYTHONPATH")) if p)
    done = subprocess.run([str(environment.python), str(Path(__file__).with_name(probe))], capture_output=True,
                          text=True, timeout=900, env=env)
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
