"""TF32 state reads on torch >= 2.9, where transformers' Trainer sets TF32 through the new
`fp32_precision` API and reading the legacy flags afterwards raises ("mix of the legacy and new APIs")."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_fwbench

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]

# What TrainingArguments(torch_compile=True) does on an Ampere GPU (transformers' own helper), then what
# the harness does after every cell: the sequence runs the same on the CPU.
SEQUENCE = """
import json, torch
from transformers.utils.import_utils import enable_tf32
from fwbench.harness.backends import TorchBackend
backend = TorchBackend()
backend.configure(1, "default")
enable_tf32(True)
after_trainer = backend.precision_state()
backend.configure(1, "off")
after_off = backend.precision_state()
print(json.dumps({"new_api": hasattr(torch.backends, "fp32_precision"), "trainer": after_trainer, "off": after_off}))
"""


def test_precision_state_after_the_trainer_enables_tf32_through_the_new_api():
    built = run_fwbench("env", "build", "native-torch")
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    python = run_fwbench("env", "path", "native-torch").stdout.strip()
    done = subprocess.run([python, "-c", SEQUENCE], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT / "runner"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state["trainer"]["tf32_matmul"] is True  # what the Trainer switched on is recorded, not an error
    assert state["trainer"]["matmul_precision"] is not None
    assert state["off"]["tf32_matmul"] is False and state["off"]["tf32_conv"] is False
