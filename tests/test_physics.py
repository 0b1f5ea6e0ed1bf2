"""The physics columns: the analytic FLOP/byte model, the peak table, the suspect flag, the published A100 rows,
the CPU ceiling, and the NVML energy columns (NVML is mocked: a GPU boundary this machine cannot run)."""

from __future__ import annotations

import json
import sys
import types

import pytest

from fwbench.core import physics, registry
from fwbench.core.models import BERT, GEMMA, MISTRAL, CausalLMShapes


def test_bert_forward_is_2n_per_token_plus_attention():
    arch, seq = BERT.arch("tiny"), 64
    h, ff, layers = arch.hidden, arch.intermediate, arch.layers
    by_hand = 2 * seq * layers * (4 * h * h + 2 * h * ff) + 2 * layers * seq * seq * h * 2 + 2 * (h * h + h * 2)
    assert physics.bert_forward(arch, seq) == by_hand


def test_training_conventions_scale_the_forward():
    fwd = physics.step_cost("bert", "predict", "tiny", 4).flops
    assert physics.step_cost("bert", "fit", "tiny", 4).flops == pytest.approx(3 * fwd)
    arch, seq = GEMMA.arch("tiny"), GEMMA.shapes["tiny"].seq_len
    lora = physics.step_cost("gemma", "fit", "tiny", 2)
    assert lora.flops == pytest.approx(2 * 2 * physics.causal_lm_forward(arch, seq, seq))
    assert "LoRA" in lora.convention and "4N" in lora.convention


def test_generate_counts_every_decode_step_and_the_growing_cache():
    arch = GEMMA.arch("tiny")
    short = physics.causal_lm_generate(arch, CausalLMShapes(32, 5, 2), 1, tied_embeddings=True)
    longer = physics.causal_lm_generate(arch, CausalLMShapes(32, 5, 3), 1, tied_embeddings=True)
    # The third token costs one more decode pass attending to 5 + 2 positions, and reads the weights again.
    assert longer[0] - short[0] == pytest.approx(physics.causal_lm_forward(arch, 1, 7))
    weights = physics.causal_lm_params(arch, True) * 2
    kv = 2 * arch.layers * arch.kv_heads * arch.head_dim * 2 * 7
    assert longer[1] - short[1] == pytest.approx(weights + kv)
    cost = physics.step_cost("gemma", "generate", "tiny", 4)
    assert cost.bytes_moved > 0 and "decode" in cost.convention


def test_sliding_window_caps_attention():
    arch = MISTRAL.arch("tiny")  # window 64
    assert physics.causal_lm_forward(arch, 1, 1000) == physics.causal_lm_forward(arch, 1, 64)
    assert physics.causal_lm_forward(arch, 1, 50) < physics.causal_lm_forward(arch, 1, 64)


def test_every_task_and_preset_has_a_positive_count():
    for task in registry.TASKS.values():
        for preset in ("tiny", "small", "paper"):
            cost = physics.step_cost(task.model, task.kind, preset, task.batch[preset])
            assert cost.flops > 0 and cost.convention
            assert (cost.bytes_moved is not None) == (task.kind == "generate")


@pytest.mark.parametrize("nvml_name, peak_name", [
    ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"), ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"), ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM5"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"), ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"),
    ("NVIDIA L40", "L40"), ("NVIDIA GH200 480GB", "GH200 96GB HBM3"), ("NVIDIA GH200 144G HBM3e", "GH200 144GB HBM3e"),
    ("NVIDIA A10G", "A10G"), ("Tesla V100-SXM2-16GB", "V100 SXM2"), ("NVIDIA GeForce RTX 4090", "RTX 4090")])
def test_peak_table_matches_nvml_names(nvml_name, peak_name):
    peak = physics.gpu_peak(nvml_name)
    assert peak is not None and peak.name == peak_name and peak.source and peak.bandwidth_gbs > 0
    assert peak.tflops["fp32"] > 0


def test_names_match_on_tokens_not_substrings():
    # "L4" is a substring of "L40", "H200" of "GH200": each used to get the other's peak.
    assert physics.gpu_peak("NVIDIA L40").tflops["bf16"] == 181 and physics.gpu_peak("NVIDIA L4").tflops["bf16"] == 121
    gh200 = physics.gpu_peak("NVIDIA GH200 480GB")
    assert gh200.bandwidth_gbs == 4000 and gh200.tflops == physics.gpu_peak("NVIDIA H100 80GB HBM3").tflops
    assert "GH200" in gh200.source and "H100" in gh200.source


@pytest.mark.parametrize("nvml_name, peak_name, bf16, tf32", [
    ("NVIDIA B200", "B200 (HGX)", 2250, 1100), ("NVIDIA GB200", "GB200 (one Blackwell GPU)", 2500, 1250)])
def test_blackwell_has_dense_tensor_peaks_and_no_guessed_fp32(nvml_name, peak_name, bf16, tf32):
    peak = physics.gpu_peak(nvml_name)
    assert peak.name == peak_name and peak.tflops == {"bf16": bf16, "fp16": bf16, "tf32": tf32}
    assert "dense = half the sparse" in peak.source and "fp32 left out" in peak.source


def test_a_mig_slice_gets_no_peak():
    assert physics.gpu_peak("NVIDIA A100-SXM4-40GB MIG 1g.5gb") is None
    from fwbench.harness import ceiling

    row = {"model": "bert", "task_kind": "predict", "preset": "tiny", "batch_size": 8, "ms_per_step": 5.0,
           "dtype": "float32", "tf32_effective": True, "device_name": "NVIDIA A100-SXM4-40GB"}
    whole = ceiling.physics_row(row, on_gpu=True)
    assert whole["peak_tflops"] == 156
    for cols in (ceiling.physics_row(row, on_gpu=True, mig_slice=True),
                 ceiling.physics_row({**row, "device_name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb"}, on_gpu=True)):
        assert cols["peak_tflops"] is None and cols["pct_of_peak"] is None and cols["precision_suspect"] is None
        assert cols["peak_source"] == physics.MIG_PEAK_SOURCE and cols["achieved_tflops"] == whole["achieved_tflops"]


def test_unknown_gpu_has_no_peak():
    assert physics.gpu_peak("NVIDIA Mystery 9000") is None and physics.gpu_peak(None) is None


def test_declared_precision():
    assert physics.declared_precision("bfloat16", False) == "bf16"
    assert physics.declared_precision("float32", True) == "tf32"
    assert physics.declared_precision("float32", None) == "fp32"


def test_suspect_only_above_the_declared_peak():
    cost = physics.StepCost(19.5e12, "x")  # 19.5 TFLOP per step
    fp32 = physics.Precisions("fp32", None)
    at_peak = physics.physics_columns(cost, 1000.0, fp32, peak_tflops=19.5, peak_source="s", bandwidth_gbs=None)
    assert at_peak["achieved_tflops"] == pytest.approx(19.5) and at_peak["precision_suspect"] is False
    above = physics.physics_columns(cost, 900.0, fp32, peak_tflops=19.5, peak_source="s", bandwidth_gbs=None)
    assert above["precision_suspect"] is True and above["pct_of_peak"] == pytest.approx(100 / 0.9)
    no_peak = physics.physics_columns(cost, 900.0, fp32, peak_tflops=None, peak_source=None, bandwidth_gbs=None)
    assert no_peak["pct_of_peak"] is None and no_peak["precision_suspect"] is None


def test_published_a100_rows_are_flagged_exactly_above_the_fp32_peak():
    from fwbench_aggregator.physics_section import published_physics

    rows = published_physics()
    assert len(rows) > 50
    for row in rows:
        achieved = row.ms_per_step and row.columns["achieved_tflops"]
        if row.task.startswith(("gemma", "mistral")):
            assert row.columns["compute_precision"] == "bf16" and not row.suspect, row
        elif row.columns["compute_precision"] == "mixed":
            # PyTorch's cuDNN convolutions ran TF32 by default: fp32 matmuls, tf32 convolutions, each at its peak.
            assert row.stack in ("native-torch", "keras3-torch") and row.task.startswith(("sam", "stable_diffusion"))
            assert (row.columns["matmul_compute_precision"], row.columns["conv_compute_precision"]) == ("fp32", "tf32")
            assert 19.5 < row.columns["peak_tflops"] < 156
            assert row.suspect == (achieved > row.columns["peak_tflops"]), row
        else:
            assert row.columns["compute_precision"] == "fp32"
            assert row.suspect == (achieved > 19.5), row
    suspect = [r for r in rows if r.suspect]
    # The issue's observation: the flagged Keras "fp32" rows run at 1.9-3.6x the A100's fp32 peak.
    keras = [r.columns["pct_of_peak"] / 100 for r in suspect if r.stack.startswith("keras")]
    assert keras and 1.3 < min(keras) and max(keras) < 4.0
    generate = [r for r in rows if "generate" in r.task]
    assert all(0 < r.columns["pct_of_bandwidth"] < 100 for r in generate)


def test_cpu_row_gets_a_measured_ceiling():
    from fwbench.harness import ceiling

    row = {"model": "bert", "task_kind": "predict", "preset": "tiny", "batch_size": 8, "ms_per_step": 5.0,
           "dtype": "float32", "tf32_effective": False}
    cols = ceiling.physics_row(row, on_gpu=False)
    assert cols["peak_source"].startswith("measured fp32 GEMM") and cols["peak_tflops"] > 0
    assert cols["compute_precision"] == "fp32" and cols["pct_of_bandwidth"] is None
    expected = physics.step_cost("bert", "predict", "tiny", 8).flops / 0.005 / 1e12
    assert cols["achieved_tflops"] == pytest.approx(expected)
    assert cols["pct_of_peak"] == pytest.approx(100 * expected / cols["peak_tflops"])


def test_gpu_row_uses_the_table_and_reports_mbu():
    from fwbench.harness import ceiling

    row = {"model": "gemma", "task_kind": "generate", "preset": "paper", "batch_size": 1, "ms_per_step": 700.0,
           "dtype": "bfloat16", "device_name": "NVIDIA H100 80GB HBM3"}
    cols = ceiling.physics_row(row, on_gpu=True)
    assert cols["peak_tflops"] == 989.5 and cols["peak_source"].startswith("table: H100 SXM5")
    cost = physics.step_cost("gemma", "generate", "paper", 1)
    assert cols["pct_of_bandwidth"] == pytest.approx(100 * cost.bytes_moved / 0.7 / 3350e9)


# --- NVML energy: a mock pynvml module (the GPU driver is a boundary this CPU machine cannot run).

class _NotSupported(Exception):
    pass


def _fake_pynvml(energy_mj: list[int] | None, throttle: int = 0x4 | 0x1):
    readings = iter(energy_mj or [])

    def energy(handle):
        if energy_mj is None:
            raise _NotSupported("NVML_ERROR_NOT_SUPPORTED")
        return next(readings)

    return types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetHandleByUUID=lambda uuid: f"gpu {uuid}",
        nvmlDeviceGetTotalEnergyConsumption=energy, NVML_CLOCK_SM=1, NVML_TEMPERATURE_GPU=0,
        nvmlDeviceGetClockInfo=lambda h, kind: 1410, nvmlDeviceGetTemperature=lambda h, kind: 61,
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: throttle)


def _cell_gpu():
    from fwbench.harness.gpu_identity import CellGpu

    return CellGpu(0, "GPU-00000000-1111-2222-3333-444444444444", "NVIDIA H100 80GB HBM3")


def _window(monkeypatch, fake, times=(10.0, 12.0)):
    from fwbench.harness import energy

    monkeypatch.setitem(sys.modules, "pynvml", fake)
    clock = iter(times)
    monkeypatch.setattr(energy.time, "perf_counter", lambda: next(clock))
    probe = energy.EnergyProbe(True, _cell_gpu())
    probe.start()
    probe.stop()
    return probe


def test_energy_window_with_a_counter(monkeypatch):
    probe = _window(monkeypatch, _fake_pynvml([1_000_000, 1_600_000]))  # 600 J over 2 s
    cols = probe.result(timed_steps=10, tokens_per_step=40)
    assert cols["energy_status"] == "ok" and cols["energy_j"] == pytest.approx(600.0)
    assert cols["joules_per_step"] == pytest.approx(60.0) and cols["joules_per_token"] == pytest.approx(1.5)
    assert cols["mean_power_w"] == pytest.approx(300.0)
    assert cols["sm_clock_mhz"] == 1410 and cols["gpu_temp_c"] == 61 and cols["throttle_reasons"] == "sw_power_cap"


def test_energy_without_a_counter_says_unsupported_never_zero(monkeypatch):
    cols = _window(monkeypatch, _fake_pynvml(None)).result(timed_steps=10, tokens_per_step=None)
    assert cols["energy_status"] == "unsupported"
    assert all(cols.get(k) is None for k in ("energy_j", "joules_per_step", "joules_per_token", "mean_power_w"))
    assert cols["sm_clock_mhz"] == 1410  # the clocks are still read


def test_cpu_cell_has_no_energy_columns():
    from fwbench.harness.energy import EnergyProbe

    probe = EnergyProbe(False, None)
    probe.start()
    probe.stop()
    assert probe.result(10, None) == {}


def test_energy_columns_are_in_the_schema():
    from fwbench.core.schema import ADDED_IN, COLUMN_NAMES, SCHEMA_VERSION

    assert SCHEMA_VERSION >= 6  # v5 added the energy columns, v6 the per-part precisions
    assert set(ADDED_IN[5]) <= set(COLUMN_NAMES)
    assert {"matmul_compute_precision", "conv_compute_precision", "conv_flops_per_step"} <= set(ADDED_IN[6])


def test_report_physics_section_flags_suspect_rows_in_markdown_and_html(tmp_path):
    import pandas as pd

    from fwbench_aggregator import document as d
    from fwbench_aggregator.physics_section import blocks

    frame = pd.DataFrame([
        {"cell_id": "keras3-jax.bert-fit.paper.<b>", "repeat": 0, "status": "ok", "device_model": "NVIDIA A100",
         "compute_precision": "fp32", "achieved_tflops": 40.0, "peak_tflops": 19.5, "pct_of_peak": 205.1,
         "pct_of_bandwidth": None, "precision_suspect": True, "peak_source": "table: A100 SXM4 40GB (x)"},
        {"cell_id": "native-torch.bert-fit.paper.compile-none", "repeat": 0, "status": "ok", "device_model": "cpu",
         "compute_precision": "fp32", "achieved_tflops": 0.1, "peak_tflops": 0.2, "pct_of_peak": 50.0,
         "pct_of_bandwidth": None, "precision_suspect": False, "peak_source": "measured fp32 GEMM"},
        {"cell_id": "native-torch.gemma-generate-bs32.paper.compile-none", "repeat": 0, "status": "ok",
         "device_model": "NVIDIA H200", "compute_precision": "bf16", "achieved_tflops": 2.0, "peak_tflops": 989.0,
         "pct_of_peak": 0.2, "pct_of_bandwidth": 30.0, "precision_suspect": False, "peak_source": "table: H200",
         "extra": json.dumps({"gpu_busy": {"status": "ok", "mean_pct": 37.4, "samples": 40, "covered_s": 6.5}})}])
    doc = d.Document("t")
    doc.add(*blocks(frame))
    markdown, html = d.to_markdown(doc, tmp_path), d.to_html(doc)
    for text in (markdown, html):
        assert "Physics" in text and "Published A100 table" in text and "Precision-suspect rows" in text
        assert "205.1% of the fp32 datasheet peak" in text and "published bert-fit keras3-jax (xla)" in text
        assert "native-torch.bert-fit.paper.compile-none repeat 0:" not in text  # not suspect: not listed
    assert "<b>" not in html and "&lt;b&gt;" in html  # row strings are escaped
    # GPU busy: the row's NVML utilization over its timed window; none on a CPU row.
    from fwbench_aggregator.physics_section import MEASURED_HEADERS, measured_rows

    busy = {row[0]: row[MEASURED_HEADERS.index("GPU busy %")] for row in measured_rows(frame)}
    assert busy == {"keras3-jax.bert-fit.paper.<b>": "—", "native-torch.bert-fit.paper.compile-none": "—",
                    "native-torch.gemma-generate-bs32.paper.compile-none": "37"}
    assert "native-torch.gemma-generate-bs32.paper.compile-none repeat 0:" not in markdown  # not suspect


def test_report_physics_section_without_v5_rows():
    import pandas as pd

    from fwbench_aggregator.physics_section import blocks, measured_rows

    frame = pd.DataFrame([{"cell_id": "c", "repeat": 0, "status": "ok"}])
    assert measured_rows(frame) == []
    assert any("No row carries physics columns" in getattr(b, "text", "") for b in blocks(frame))


def test_gpu_cell_without_nvml_says_so(monkeypatch):
    from fwbench.harness import energy

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: no pynvml in the environment
    probe = energy.EnergyProbe(True, _cell_gpu())
    probe.start()
    probe.stop()
    cols = probe.result(10, None)
    assert cols["energy_status"] == "nvml_unavailable" and cols.get("energy_j") is None


def test_cpu_ceiling_is_measured_once_per_run(tmp_path):
    from fwbench.harness import ceiling

    tflops, source = ceiling.cpu_ceiling("run-a", tmp_path)
    assert tflops > 0 and "once per run" in source
    saved = list(tmp_path.glob("cpu-gemm.run-a.*cores.json"))
    assert len(saved) == 1
    # Later cells of the run read what the first one measured (a changed figure shows it is read, not re-measured).
    saved[0].write_text(json.dumps({"tflops": 123.0, "source": source}))
    assert ceiling.cpu_ceiling("run-a", tmp_path) == (123.0, source)
    assert ceiling.cpu_ceiling("run-b", tmp_path)[0] != 123.0  # another run measures again


def test_suspect_word_reads_numpy_booleans():
    import numpy as np

    from fwbench_aggregator.physics_section import _suspect_word

    assert _suspect_word(np.bool_(True)) == "SUSPECT" and _suspect_word(np.bool_(False)) == "no"
    assert _suspect_word(None) == "—" and _suspect_word(float("nan")) == "—"


def test_convolution_share_of_the_flops():
    """SD and SAM count their convolutions apart (SD's UNet and VAE, SAM's patch embedding, neck and decoder
    up-convolutions); the transformers have none."""
    for task, preset in (("bert-fit", "paper"), ("bert-predict", "tiny"), ("gemma-fit", "tiny"),
                         ("mistral-generate-bs1", "tiny")):
        t = registry.TASKS[task]
        assert physics.step_cost(t.model, t.kind, preset, t.batch[preset]).conv_flops == 0
    vae = physics.step_cost("stable_diffusion", "fit", "paper", 8)
    unet = physics.step_cost("stable_diffusion", "predict", "paper", 13)
    sam = physics.step_cost("sam", "predict", "paper", 4)
    assert 0.9 < vae.conv_flops / vae.flops < 1.0  # all but the mid-block attention
    assert 0.3 < unet.conv_flops / unet.flops < 0.8  # resnets and 1x1 projections vs attention and GEGLU
    assert 0 < sam.conv_flops / sam.flops < 0.05  # a ViT: the patch embedding, neck and up-convs only
    arch = registry.workload("sam-predict", "paper").arch
    patch = 2.0 * arch.grid ** 2 * arch.patch_size ** 2 * 3 * arch.embed_dim
    neck = 2.0 * arch.grid ** 2 * (arch.embed_dim * arch.prompt_dim + 9 * arch.prompt_dim ** 2)
    assert physics.sam_encoder_forward_parts(arch).conv == pytest.approx(patch + neck)


def test_a_mixed_row_counts_each_part_at_its_own_peak():
    cost = physics.StepCost(10e12, "x", conv_flops=6e12)  # 4 TFLOP of matmuls, 6 of convolutions
    precisions = physics.step_precisions(cost, "float32", tf32_effective=False, tf32_conv_effective=True)
    assert (precisions.matmul, precisions.conv, precisions.combined) == ("fp32", "tf32", "mixed")
    peak = physics.effective_peak(cost, precisions, {"fp32": 20.0, "tf32": 150.0})
    assert peak == pytest.approx(10e12 / (4e12 / 20.0 + 6e12 / 150.0))
    # One second per step: 10 TFLOP/s, against 4/20 + 6/150 = 0.24 s at the two peaks.
    row = physics.physics_columns(cost, 1000.0, precisions, peak_tflops=peak, peak_source="s", bandwidth_gbs=None)
    assert row["pct_of_peak"] == pytest.approx(24.0)
    assert (row["compute_precision"], row["matmul_compute_precision"], row["conv_compute_precision"],
            row["conv_flops_per_step"]) == ("mixed", "fp32", "tf32", 6e12)
    same = physics.step_precisions(cost, "float32", tf32_effective=True, tf32_conv_effective=True)
    assert same.combined == "tf32" and physics.effective_peak(cost, same, {"fp32": 20.0, "tf32": 150.0}) == 150.0
    no_convs = physics.step_precisions(physics.StepCost(1e12, "x"), "bfloat16", False, True)
    assert (no_convs.matmul, no_convs.conv, no_convs.combined) == ("bf16", None, "bf16")
    assert physics.effective_peak(cost, precisions, {"fp32": 20.0}) is None  # a part without a peak: none


def test_gpu_row_with_tf32_convolutions_only_is_mixed():
    """What a torch SD row on an A100 records by default (matmuls fp32, cuDNN convolutions TF32)."""
    from fwbench.harness import ceiling

    row = {"model": "stable_diffusion", "task_kind": "predict", "preset": "paper", "batch_size": 13,
           "ms_per_step": 500.0, "dtype": "float32", "tf32_effective": False, "tf32_conv_effective": True,
           "device_name": "NVIDIA A100-SXM4-40GB"}
    cols = ceiling.physics_row(row, on_gpu=True)
    cost = physics.step_cost("stable_diffusion", "predict", "paper", 13)
    assert cols["compute_precision"] == "mixed" and cols["conv_compute_precision"] == "tf32"
    assert cols["conv_flops_per_step"] == cost.conv_flops > 0
    assert cols["peak_tflops"] == pytest.approx(cost.flops / (cost.matmul_flops / 19.5 + cost.conv_flops / 156))
    assert "mixed" in cols["peak_source"]
    bert = ceiling.physics_row({**row, "model": "bert", "batch_size": 256}, on_gpu=True)
    assert bert["compute_precision"] == "fp32" and bert["conv_compute_precision"] is None
    assert bert["conv_flops_per_step"] == 0 and bert["peak_tflops"] == 19.5


def test_a_cpu_row_above_its_measured_ceiling_is_not_accused_of_another_precision(tmp_path):
    """A CPU's ceiling is a GEMM probe, which the model's own kernels can outrun: the warning says so instead of
    suggesting the row ran another precision (the demo report flagged native-torch mistral-fit at 221%)."""
    import pandas as pd

    from fwbench_aggregator import document as d
    from fwbench_aggregator.physics_section import blocks

    frame = pd.DataFrame([
        {"cell_id": "native-torch.mistral-fit.tiny.compile-none", "repeat": 0, "status": "ok", "device_model": "cpu",
         "compute_precision": "bf16", "achieved_tflops": 0.0015, "peak_tflops": 0.0007, "pct_of_peak": 221.0,
         "pct_of_bandwidth": None, "precision_suspect": True, "peak_source": "measured bf16 GEMM 1024x1024 (torch)"}])
    doc = d.Document("t")
    doc.add(*blocks(frame))
    markdown = d.to_markdown(doc, tmp_path)
    line = next(text for text in markdown.splitlines() if "mistral-fit.tiny.compile-none repeat 0:" in text)
    assert "ceiling measured on this CPU" in line and "no evidence of another precision" in line
    assert "datasheet" not in line
