"""One decision of whether a failed cell is `unsupported` (the library cannot run this variant: its own words) or an
error: fwbench.harness.cell.unsupported_variant, applied by cell.run. The failures are raised by a stand-in
measure(): what the libraries say is quoted from their runs (benchmarks/scaling_matrix.py, precision_matrix.py)."""

from __future__ import annotations

import json

import pytest

from fwbench.core.spec import CellSpec
from fwbench.harness import cell, ranks

# TensorFlow's words for MirroredStrategy with jit_compile=True on 2 CPU devices (abridged).
MIRRORED_XLA = ("Graph execution error:\nDetected at node StatefulPartitionedCall\n"
                "Trying to access resource Resource-7-at-0x55d1 (defined @ keras/src/backend/tensorflow/core.py:42) "
                "located in device /job:localhost/replica:0/task:0/device:CPU:1 from device "
                "/job:localhost/replica:0/task:0/device:CPU:0\n"
                " Cf. https://www.tensorflow.org/xla/known_issues#tfvariable_on_a_different_device")
NO_HALF_KERNEL = "\"addmm_impl_cpu_\" not implemented for 'Half'"


def spec(**fields) -> CellSpec:
    return CellSpec("keras3-tensorflow", "bert-fit", "tiny", "xla", "/data", 2, **fields)


def test_the_library_that_cannot_run_a_variant_is_named_in_its_own_words():
    mirrored = cell.unsupported_variant(spec(devices=2), RuntimeError(MIRRORED_XLA))
    assert mirrored.startswith("--devices 2: tf.distribute.MirroredStrategy with jit_compile=True: XLA cannot ")
    assert mirrored.endswith("--jit off runs it without XLA: Trying to access resource Resource-7-at-0x55d1 (defined "
                             "@ keras/src/backend/tensorflow/core.py:42) located in device "
                             "/job:localhost/replica:0/task:0/device:CPU:1 from device "
                             "/job:localhost/replica:0/task:0/device:CPU:0")
    assert cell.unsupported_variant(spec(devices=1), RuntimeError(MIRRORED_XLA)) is None  # one device: an error
    half = cell.unsupported_variant(spec(precision="fp16"), RuntimeError(NO_HALF_KERNEL))
    assert half == ("--precision fp16: the library has no kernel or no consistent dtype handling for it here: "
                    + NO_HALF_KERNEL)
    assert cell.unsupported_variant(spec(), RuntimeError(NO_HALF_KERNEL)) is None  # the published precision: error
    # Both at once: the precision decides, as it always did.
    both = cell.unsupported_variant(spec(devices=2, precision="fp16"), RuntimeError(f"{NO_HALF_KERNEL}\n{MIRRORED_XLA}"))
    assert both.startswith("--precision fp16: ")
    assert cell.unsupported_variant(spec(devices=2), RuntimeError("out of range")) is None


def _run(tmp_path, monkeypatch, failing: BaseException, **fields) -> dict:
    def measure(*args, **kwargs):
        raise failing

    monkeypatch.setattr(cell, "measure", measure)
    monkeypatch.setattr(cell, "measure_data_parallel", measure)
    cell.run(spec(**fields), tmp_path / "record.json")
    return json.loads((tmp_path / "record.json").read_text())


@pytest.mark.parametrize("failing, fields, status, starts", [
    (RuntimeError(MIRRORED_XLA), {"devices": 2}, "unsupported", "--devices 2: tf.distribute.MirroredStrategy"),
    (RuntimeError(NO_HALF_KERNEL), {"precision": "fp16"}, "unsupported", "--precision fp16: the library has no"),
    (RuntimeError(NO_HALF_KERNEL), {}, "error", NO_HALF_KERNEL),
    (MemoryError("out of memory"), {"precision": "fp16"}, "oom", "out of memory"),
])
def test_a_cell_run_records_the_decision(tmp_path, monkeypatch, failing, fields, status, starts):
    record = _run(tmp_path, monkeypatch, failing, **fields)
    assert record["status"] == status and record["error_message"].startswith(starts)
    assert record["error_type"] == type(failing).__name__ and "traceback" in record["extra"]


def test_a_ranks_own_unsupported_reason_is_not_called_a_missing_kernel(tmp_path, monkeypatch):
    """A rank that found its variant unsupported says why; it used to be prefixed with "--precision published: the
    library has no kernel or no consistent dtype handling", which was not what happened."""
    monkeypatch.setattr(cell, "in_processes", lambda spec: True)
    reason = "rank 1 of 2: Unsupported: --precision published asks for float32 compute, but the model computed in x"
    record = _run(tmp_path, monkeypatch, ranks.RankFailed("unsupported", reason), devices=2)
    assert (record["status"], record["error_message"]) == ("unsupported", reason)
