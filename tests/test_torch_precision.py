"""TF32 state reads on torch >= 2.9 (integration, native-torch environment): transformers' Trainer sets TF32 through
the new `fp32_precision` API, Inductor reads the legacy flags, and a mix of the two makes legacy reads raise."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_fwbench

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]

# On the real torch of the native-torch environment, with the CUDA boundary mocked (an Ampere GPU: this
# machine has none; the TF32 flags live in torch's Context and behave the same without a GPU): fwbench's
# setting, then what TrainingArguments does with the tf32 it is given (transformers' own enable_tf32), then
# every legacy read (Inductor's) and new-API read (transformers', fwbench's). One process per combination.
SEQUENCE = """
import json, sys, torch
from unittest import mock
from transformers.utils.import_utils import enable_tf32
from fwbench.harness.backends import TorchBackend
setting, compiled = sys.argv[1], sys.argv[2] == "compiled"
with mock.patch("torch.cuda.is_available", return_value=True), \\
        mock.patch("torch.cuda.get_device_capability", return_value=(8, 0)), \\
        mock.patch("torch.cuda.reset_peak_memory_stats"):
    backend = TorchBackend(device="cuda")
    backend.configure(1, setting)
    tf32, _ = backend.trainer_tf32(setting, compiled=compiled)
    if tf32 is not None:
        enable_tf32(tf32)
    b = torch.backends
    reads = {"legacy_matmul": b.cuda.matmul.allow_tf32, "legacy_cudnn": b.cudnn.allow_tf32,
             "matmul_precision": torch.get_float32_matmul_precision(), "new_matmul": b.cuda.matmul.fp32_precision,
             "new_conv": b.cudnn.conv.fp32_precision, "new_rnn": b.cudnn.rnn.fp32_precision}
    print(json.dumps({"trainer_tf32": tf32, "reads": reads, "state": backend.precision_state()}))
"""


@pytest.mark.parametrize("setting, compiled", [("default", "eager"), ("default", "compiled"), ("on", "compiled"),
                                               ("off", "compiled")])
def test_no_tf32_read_raises_after_fwbench_and_the_trainer_set_it(setting, compiled):
    built = run_fwbench("env", "build", "native-torch")
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    python = run_fwbench("env", "path", "native-torch").stdout.strip()
    done = subprocess.run([python, "-c", SEQUENCE, setting, compiled], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT / "runner"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]  # a mixed state raises on the first legacy read
    got = json.loads(done.stdout.strip().splitlines()[-1])
    reads, state = got["reads"], got["state"]
    assert reads["legacy_matmul"] == (reads["new_matmul"] == "tf32") == (reads["matmul_precision"] != "highest")
    assert reads["legacy_cudnn"] == (reads["new_conv"] == "tf32") == (reads["new_rnn"] == "tf32")
    expected = {"on": (True, True), "off": (False, False),
                "default": (True, True) if compiled == "compiled" else (False, True)}[setting]
    assert (state["tf32_effective"], state["tf32_conv_effective"]) == expected
    assert (state["tf32_matmul"], state["tf32_conv"]) == expected
