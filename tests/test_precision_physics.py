"""Physics at the precision that ran: fp16 peaks, compute_dtype before dtype, and the CPU's bf16/fp16 ceilings
(measured through the cell's framework; a fake GEMM hook stands in for it here)."""

from __future__ import annotations

import json

import pytest

from fwbench.core import physics
from fwbench.harness import ceiling

A100 = "NVIDIA A100-SXM4-40GB"


def _row(**extra):
    row = {"model": "bert", "task_kind": "fit", "preset": "tiny", "batch_size": 8, "ms_per_step": 5.0,
           "dtype": "float32", "tf32_effective": False, "tf32_conv_effective": False, "device_name": A100}
    return {**row, **extra}


@pytest.mark.parametrize("name, fp16", [
    ("NVIDIA A100-SXM4-40GB", 312), ("NVIDIA H100 80GB HBM3", 989.5), ("NVIDIA H100 PCIe", 756),
    ("NVIDIA H100 NVL", 835), ("NVIDIA H200", 989.5), ("NVIDIA L4", 121), ("NVIDIA L40S", 362), ("NVIDIA L40", 181),
    ("NVIDIA A10G", 125), ("Tesla V100-SXM2-16GB", 125), ("NVIDIA GeForce RTX 4090", 165.2), ("NVIDIA B200", 2250),
    ("NVIDIA GB200", 2500)])
def test_fp16_peaks(name, fp16):
    peak = physics.gpu_peak(name)
    assert peak.tflops["fp16"] == fp16
    if "bf16" in peak.tflops:  # fp16 and bf16 tensor cores are the same speed (FP32 accumulate)
        assert peak.tflops["fp16"] == peak.tflops["bf16"]


def test_volta_has_fp16_tensor_cores_and_no_bf16():
    v100 = physics.gpu_peak("Tesla V100-SXM2-16GB")
    assert "bf16" not in v100.tflops and "tf32" not in v100.tflops and "fp16" in v100.source
    cols = ceiling.physics_row(_row(compute_dtype="bfloat16", device_name="Tesla V100-SXM2-16GB"), on_gpu=True)
    assert cols["compute_precision"] == "bf16" and cols["peak_tflops"] is None and cols["pct_of_peak"] is None


@pytest.mark.parametrize("dtype, compute_dtype, tf32, expected", [
    ("float32", "float16", True, "fp16"),  # autocast: TF32 does not matter, the matmuls run fp16
    ("float32", "bfloat16", False, "bf16"),
    ("float32", "mixed_float16", False, "fp16"),  # a Keras policy name
    ("bfloat16", "bfloat16", False, "bf16"),
    ("float32", "float32", True, "tf32"),
    ("float32", "float32", False, "fp32"),
    ("bfloat16", None, False, "bf16"),  # an older row: the dtype column decides
    ("float32", None, True, "tf32"),
    ("float32", None, None, "fp32"),
])
def test_declared_precision_reads_compute_dtype_first(dtype, compute_dtype, tf32, expected):
    assert physics.declared_precision(dtype, tf32, compute_dtype) == expected


@pytest.mark.parametrize("extra, precision, peak", [
    ({"dtype": "bfloat16", "compute_dtype": "bfloat16"}, "bf16", 312),  # a bf16 row
    ({"compute_dtype": "float16", "tf32_effective": True}, "fp16", 312),  # an fp16 (autocast) row
    ({"compute_dtype": "float32", "tf32_effective": True}, "tf32", 156),
    ({"compute_dtype": "float32"}, "fp32", 19.5),
    ({"dtype": "bfloat16"}, "bf16", 312),  # older rows: no compute_dtype column
    ({"tf32_effective": True}, "tf32", 156),
    ({}, "fp32", 19.5),
])
def test_a100_row_is_measured_against_the_precision_that_ran(extra, precision, peak):
    cols = ceiling.physics_row(_row(**extra), on_gpu=True)
    assert cols["compute_precision"] == precision and cols["peak_tflops"] == peak
    assert cols["pct_of_peak"] == pytest.approx(100 * cols["achieved_tflops"] / peak)


def test_a_mixed_precision_row_runs_matmuls_and_convolutions_in_the_autocast_dtype():
    """SD under autocast with cuDNN TF32 on: the convolutions run fp16 too, not tf32: one precision, one peak."""
    row = _row(model="stable_diffusion", task_kind="predict", preset="paper", batch_size=13, ms_per_step=500.0,
               compute_dtype="float16", tf32_effective=False, tf32_conv_effective=True)
    cols = ceiling.physics_row(row, on_gpu=True)
    assert (cols["matmul_compute_precision"], cols["conv_compute_precision"], cols["compute_precision"]) == \
        ("fp16", "fp16", "fp16")
    assert cols["peak_tflops"] == 312 and "mixed" not in cols["peak_source"]
    older = ceiling.physics_row({k: v for k, v in row.items() if k != "compute_dtype"}, on_gpu=True)
    assert older["compute_precision"] == "mixed" and 19.5 < older["peak_tflops"] < 156  # today's rule, unchanged


# --- the CPU: fp32 from NumPy, bf16/fp16 from the cell's framework -------------------------------------------

def _cpu_row(**extra):
    return _row(**{"device_name": "Test CPU", "run_id": "run-a", "stack": "native-torch", **extra})


def test_a_bf16_cpu_row_is_measured_against_the_bf16_gemm(tmp_path):
    asked = []

    def gemm(dtype):
        asked.append(dtype)
        return 4.0

    cols = ceiling.physics_row(_cpu_row(dtype="bfloat16", compute_dtype="bfloat16"), on_gpu=False,
                               cache_dir=tmp_path, gemm=gemm)
    assert asked == ["bfloat16"] and cols["peak_tflops"] == 4.0 and cols["compute_precision"] == "bf16"
    assert cols["peak_source"].startswith("measured bf16 GEMM") and "torch" in cols["peak_source"]
    # Once per run, core count and framework: the next cell reads it back.
    again = ceiling.physics_row(_cpu_row(dtype="bfloat16"), on_gpu=False, cache_dir=tmp_path, gemm=gemm)
    assert asked == ["bfloat16"] and again["peak_tflops"] == 4.0
    (saved,) = tmp_path.glob("cpu-gemm-bf16.torch.run-a.*cores.json")
    assert json.loads(saved.read_text())["tflops"] == 4.0
    jax = ceiling.physics_row(_cpu_row(dtype="bfloat16", stack="keras3-jax"), on_gpu=False, cache_dir=tmp_path,
                              gemm=lambda dtype: 1.0)
    assert jax["peak_tflops"] == 1.0  # another framework's bf16 GEMM is its own
    fp32 = ceiling.physics_row(_cpu_row(), on_gpu=False, cache_dir=tmp_path, gemm=gemm)
    assert asked == ["bfloat16"] and fp32["peak_source"].startswith("measured fp32 GEMM")  # NumPy, no hook


def test_an_fp16_cpu_row_without_an_fp16_gemm_is_held_to_the_fp32_gemm_and_says_why(tmp_path):
    cols = ceiling.physics_row(_cpu_row(compute_dtype="float16"), on_gpu=False, cache_dir=tmp_path,
                               gemm=lambda dtype: None)
    assert cols["compute_precision"] == "fp16" and cols["achieved_tflops"] > 0
    assert cols["peak_source"].startswith("measured fp32 GEMM") and "standing in for fp16" in cols["peak_source"]
    assert "none:" in cols["peak_source"] and "float16" in cols["peak_source"]

    def raises(dtype):
        raise RuntimeError("addmm_impl_cpu_ not implemented for 'Half'")

    cols = ceiling.physics_row(_cpu_row(compute_dtype="float16", run_id="run-b"), on_gpu=False, gemm=raises)
    assert cols["peak_tflops"] > 0 and "not implemented for 'Half'" in cols["peak_source"]
    ok = ceiling.physics_row(_cpu_row(compute_dtype="float16", run_id="run-c"), on_gpu=False, gemm=lambda d: 2.0)
    assert ok["peak_tflops"] == 2.0 and ok["peak_source"].startswith("measured fp16 GEMM")


def test_a_half_gemm_probe_slower_than_fp32_never_makes_a_cpu_row_suspect(tmp_path):
    """Seen: torch's bf16 matmul probe at 0.0007 TFLOP/s on a CPU without AVX-512 BF16 while the model's linear
    layers ran faster: native-torch mistral-fit was SUSPECT at 221% of that 'peak'. Such a CPU widens bf16 to fp32
    in its fast kernels, so the fp32 GEMM bounds it."""
    row = _cpu_row(dtype="bfloat16", compute_dtype="bfloat16", run_id="run-slow")
    fp32 = ceiling.cpu_ceiling("run-slow", tmp_path)[0]
    probe = ceiling.physics_row(row, on_gpu=False, cache_dir=tmp_path, gemm=lambda dtype: fp32 / 100)
    # The row at a tenth of the fp32 GEMM: ten times what the slow bf16 probe reached.
    row["ms_per_step"] *= probe["achieved_tflops"] / (fp32 / 10)
    cols = ceiling.physics_row(row, on_gpu=False, cache_dir=tmp_path, gemm=lambda dtype: fp32 / 100)
    assert cols["peak_tflops"] == pytest.approx(fp32) and "standing in for bf16" in cols["peak_source"]
    assert cols["precision_suspect"] is not True


def test_a_cpu_row_without_its_frameworks_gemm_is_held_to_the_fp32_gemm():
    """The cell passes its backend's GEMM hook; without one a bf16 row on a CPU is held to the fp32 GEMM, and
    says why."""
    cols = ceiling.physics_row(_cpu_row(dtype="bfloat16", stack="keras3-jax", run_id=None), on_gpu=False)
    assert cols["peak_tflops"] > 0 and "none:" in cols["peak_source"] and "jax" in cols["peak_source"]


def test_every_backend_offers_the_gemm_hook():
    from fwbench.harness import backends

    assert all(callable(getattr(cls, "gemm_tflops", None)) for cls in backends.BACKENDS.values())


def test_the_torch_hook_measures_a_bf16_gemm_on_this_cpu():
    pytest.importorskip("torch")
    from fwbench.harness.backends import TorchBackend

    assert TorchBackend("cpu").gemm_tflops("bfloat16") > 0


def test_a_slow_half_gemm_is_timed_once_more_only(monkeypatch):
    """torch's fp16 matmul on a CPU without an fp16 kernel takes seconds per call: warm-up + one timed call."""
    calls = []
    monkeypatch.setattr(ceiling, "SLOW_GEMM_S", 0.0)
    assert ceiling.best_gemm_seconds(lambda: calls.append(1)) >= 0 and len(calls) == 2
    monkeypatch.setattr(ceiling, "SLOW_GEMM_S", 60.0)
    calls.clear()
    ceiling.best_gemm_seconds(lambda: calls.append(1))
    assert len(calls) == 1 + ceiling.GEMM_REPEATS
