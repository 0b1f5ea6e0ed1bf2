"""The report's physics section: achieved TFLOP/s against the ceiling of the declared precision, for fwbench's
rows and for the published A100 table, and the rows that cannot have run at their declared precision.

Framework-free: the FLOP model is fwbench.core.physics (plain Python).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from fwbench.core import physics, registry
from fwbench.core.results import extra_of
from fwbench_aggregator import document as d
from fwbench_aggregator.published import REFERENCE_FILE, REFERENCE_SOURCE, REFERENCE_VERSION, task_id

PUBLISHED_GPU = "NVIDIA A100-SXM4-40GB"  # the published run: 1x A100 40 GB
LLM_MODELS = ("gemma", "mistral")  # the only bf16 tasks; every other published task declares fp32


@dataclass(frozen=True)
class PublishedPhysics:
    task: str
    stack: str
    compile: str
    batch_size: int
    ms_per_step: float
    columns: dict

    @property
    def suspect(self) -> bool:
        return bool(self.columns["precision_suspect"])


def published_physics(page_version: str = REFERENCE_VERSION) -> list[PublishedPhysics]:
    """Every row of the published table (each batch size it lists) with the physics columns at preset paper."""
    text = (Path(__file__).parent / "data" / REFERENCE_FILE).read_text(encoding="utf-8")
    peak = physics.gpu_peak(PUBLISHED_GPU)
    out = []
    for row in csv.DictReader(io.StringIO(text)):
        if row["page_version"] != page_version:
            continue
        batch, ms = int(row["batch_size"]), float(row["ms_per_step"])
        cost = physics.step_cost(row["model"], row["task"], "paper", batch)
        precisions = published_precisions(row["model"], row["stack"], cost)
        columns = physics.physics_columns(cost, ms, precisions,
                                          peak_tflops=physics.effective_peak(cost, precisions, peak.tflops),
                                          peak_source=f"table: {peak.name} ({peak.source})",
                                          bandwidth_gbs=peak.bandwidth_gbs)
        out.append(PublishedPhysics(task_id(row["model"], row["task"], batch), row["stack"], row["compile"], batch,
                                    ms, columns))
    return out


def published_precisions(model: str, stack: str, cost: physics.StepCost) -> physics.Precisions:
    """What the published A100 rows declare, with what PyTorch is known to do by default: the LLM tasks are
    bf16, the others fp32, except that PyTorch's cuDNN convolutions run TF32 by default on Ampere
    (torch.backends.cudnn.allow_tf32 is True from torch 1.7 on, 2.2 included), so the convolutions of the
    torch stacks' SD and SAM rows count at the TF32 peak (a mixed row). TensorFlow and JAX also default to TF32
    (matmuls and convolutions alike): their rows keep the declared fp32, so the section can show that they
    ran faster than fp32 allows."""
    if model in LLM_MODELS:
        return physics.Precisions("bf16", "bf16" if cost.conv_flops > 0 else None)
    conv = None
    if cost.conv_flops > 0:
        conv = "tf32" if registry.STACKS[stack].harness_backend == "torch" else "fp32"
    return physics.Precisions("fp32", conv)


def _num(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return format(value, fmt)


def _suspect_word(value) -> str:
    # Parquet booleans arrive as numpy.bool_, None or NaN: test truth, not identity.
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return "SUSPECT" if bool(value) else "no"


def gpu_busy_pct(extra) -> float | None:
    """A row's extra.gpu_busy.mean_pct (NVML's utilization over its timed window); None where it has none (a CPU
    row, an older row, or a GPU row whose status says why)."""
    try:
        busy = (extra_of(extra) or {}).get("gpu_busy") or {}
    except (ValueError, TypeError, AttributeError):
        return None
    return busy.get("mean_pct") if busy.get("status") == "ok" else None


def measured_rows(frame) -> list[list[str]]:
    """One line per ok row that has physics columns (schema v5 rows)."""
    if "achieved_tflops" not in frame.columns:
        return []
    ok = frame[(frame["status"] == "ok") & frame["achieved_tflops"].notna()]
    rows = []
    for _, r in ok.sort_values(["cell_id", "repeat"]).iterrows():
        rows.append([str(r["cell_id"]), str(int(r["repeat"])), str(r.get("device_model") or "—"),
                     str(r["compute_precision"]), _num(r["achieved_tflops"], ".4g"), _num(r["peak_tflops"], ".4g"),
                     _num(r["pct_of_peak"], ".1f"), _num(r.get("pct_of_bandwidth"), ".1f"),
                     _num(gpu_busy_pct(r.get("extra")), ".0f"),
                     _suspect_word(r["precision_suspect"]), str(r.get("peak_source") or "—")])
    return rows


MEASURED_HEADERS = ["cell", "repeat", "device", "precision", "achieved TFLOP/s", "peak TFLOP/s", "% of peak",
                    "MBU %", "GPU busy %", "suspect", "peak source"]
SUSPECT, SOURCE = MEASURED_HEADERS.index("suspect"), MEASURED_HEADERS.index("peak source")
PUBLISHED_HEADERS = ["task", "stack", "compile", "batch", "published ms", "precision", "achieved TFLOP/s",
                     "% of peak", "MBU %", "suspect"]


def blocks(frame) -> list:
    rows = measured_rows(frame)
    published = published_physics()
    out: list = [d.Heading("Physics: achieved TFLOP/s against the hardware"),
                 d.Paragraph("Model FLOPs per step are counted from the architecture (fwbench.core.physics: 2 per "
                             "multiply-add of matmuls, convolutions and attention products; training 3x forward, "
                             "LoRA training 2x forward, generate = prefill + each decode step). % of peak is "
                             "against the dense ceiling of the precision the row ran (its compute dtype, else its "
                             "dtype and TF32 state: GPU datasheet fp32/tf32/bf16/fp16, or on a CPU a measured GEMM, "
                             "fp32 with NumPy, bf16/fp16 with the cell's framework); MBU = bytes a generate step must read / time / memory bandwidth. "
                             "GPU busy % (NVIDIA GPUs) is NVML's share of the timed window in which a kernel ran: "
                             "well under 100 the GPU waited for the host (kernel launches, data), whatever the "
                             "kernels achieved while they ran. "
                             "On a GPU a row above 100% of its precision's datasheet peak cannot have run at "
                             "that precision: it is marked SUSPECT. On a CPU the ceiling is a measured GEMM, which "
                             "the model's own kernels can outrun: a CPU row above it is marked too, but that says "
                             "the probe was slow, not that the row ran another precision.", "note")]
    if rows:
        out += [d.Heading("fwbench rows", 3), d.Table(MEASURED_HEADERS, rows, css_class="text")]
    else:
        out.append(d.Paragraph("No row carries physics columns (schema v5 or newer)."))
    out += [d.Heading("Published A100 table", 3),
            d.Paragraph(f"{REFERENCE_SOURCE}; ceiling: {physics.gpu_peak(PUBLISHED_GPU).name} "
                        f"({physics.gpu_peak(PUBLISHED_GPU).source}). LLM tasks declare bf16, all others fp32; "
                        "the torch stacks' convolutions (SD, SAM) ran TF32, cuDNN's default on the A100, so "
                        "those rows are mixed: each part's FLOPs count at its own peak.",
                        "note"),
            d.Table(PUBLISHED_HEADERS,
                    [[p.task, p.stack, p.compile, str(p.batch_size), _num(p.ms_per_step, ".2f"),
                      p.columns["compute_precision"], _num(p.columns["achieved_tflops"], ".4g"),
                      _num(p.columns["pct_of_peak"], ".1f"), _num(p.columns["pct_of_bandwidth"], ".1f"),
                      _suspect_word(p.columns["precision_suspect"])] for p in published], css_class="text")]
    flagged = [f"fwbench {r[0]} repeat {r[1]}: {r[4]} TFLOP/s = {r[6]}% of the {r[3]} "
               + ("ceiling measured on this CPU (a GEMM probe the model's kernels outran; no evidence of another "
                  "precision)" if str(r[SOURCE]).startswith("measured") else "datasheet peak")
               for r in rows if r[SUSPECT] == "SUSPECT"]
    flagged += [f"published {p.task} {p.stack} ({p.compile}): {p.columns['achieved_tflops']:.1f} TFLOP/s = "
                f"{p.columns['pct_of_peak']:.0f}% of the A100's {p.columns['compute_precision']} peak"
                for p in published if p.suspect]
    if flagged:
        out += [d.Heading("Precision-suspect rows", 3),
                d.Paragraph("Faster than the ceiling of the precision each row declares; against a datasheet "
                            "peak that means it ran another precision (an 'fp32' row that ran TF32, say):",
                            "warning"),
                d.BulletList(flagged, "warning")]
    return out
