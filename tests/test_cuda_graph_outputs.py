"""Outputs of compiled modules under CUDA graphs (`reduce-overhead`) live in memory the next replay reuses: what a
cell keeps across module calls must be a copy. Seen on an H100 (2026-11-26): the SAM predict cell and the compiled
Trainer fit failed with "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run".
No CUDA graphs run on a CPU: the replay's memory reuse is stood in for at that boundary (GraphLike, FakeLoss)."""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

import pytest

from fwbench.core import registry
from fwbench.workloads import CellContext
from tests.conftest import run_fwbench

REPO = Path(__file__).resolve().parents[1]


class FakeLoss:
    """A device scalar whose memory a later CUDA-graph replay overwrites; detach() shares it, as torch's does."""

    def __init__(self, value: float):
        self.value = value

    def detach(self) -> "FakeLoss":
        return self

    def clone(self) -> "FakeLoss":
        return FakeLoss(self.value)

    def __float__(self) -> float:
        return self.value


def test_a_recorded_loss_survives_the_next_replay_overwriting_its_memory():
    ctx = CellContext.__new__(CellContext)
    ctx.losses = []
    loss = FakeLoss(0.7)
    ctx.record_loss(loss)
    loss.value = math.nan  # the next step's replay writes its loss into the same memory
    assert ctx.nonfinite_losses() == 0


SAM_WITH_GRAPH_LIKE_MODULES = r"""
import math, torch
from fwbench.core import registry
from fwbench.workloads.torch.sam import SegmentCell, build_sam


class GraphLike(torch.nn.Module):
    # Stands in for a module compiled with CUDA graphs (cudagraph trees): its outputs are written into buffers of its
    # own that every call reuses, and calling a module again that already ran in this generation starts a new
    # generation, whose replays reuse the memory of every earlier output (poisoned here with NaN).
    generation, live = [0], []

    def __init__(self, inner):
        super().__init__()
        self.inner, self.buffers_out, self.ran_in = inner, None, -1

    def forward(self, *args, **kwargs):
        if self.ran_in == GraphLike.generation[0]:
            GraphLike.generation[0] += 1
            for buffer in GraphLike.live:
                buffer.fill_(math.nan)
            GraphLike.live.clear()
        self.ran_in = GraphLike.generation[0]
        out = self.inner(*args, **kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        if self.buffers_out is None:
            self.buffers_out = [torch.empty_like(o) for o in outs]
        for buffer, o in zip(self.buffers_out, outs):
            buffer.copy_(o)
        GraphLike.live.extend(self.buffers_out)
        return tuple(self.buffers_out) if isinstance(out, tuple) else self.buffers_out[0]


arch = registry.workload("sam-predict", "tiny").arch
torch.manual_seed(0)
sam = build_sam(arch).eval()
batch = 3
images = torch.randn(batch, 3, arch.image_size, arch.image_size)
points = torch.rand(batch, 2, 2) * arch.image_size
labels = torch.ones(batch, 2, dtype=torch.int64)
reference = SegmentCell(sam, images, points, labels).step().clone()
sam.image_encoder, sam.mask_decoder = GraphLike(sam.image_encoder), GraphLike(sam.mask_decoder)
cell = SegmentCell(sam, images, points, labels)
for _ in range(2):
    masks = cell.step()
    assert not torch.isnan(masks).any(), "a mask was read after a later replay overwrote it"
    torch.testing.assert_close(masks, reference)
print("ok")
"""


@pytest.mark.integration
def test_sam_predict_keeps_copies_of_what_a_later_replay_overwrites(tmp_path):
    built = run_fwbench("env", "build", "native-torch")
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    python = run_fwbench("env", "path", "native-torch").stdout.strip()
    env = {**os.environ, "PYTHONPATH": str(REPO / "runner")}
    done = subprocess.run([python, "-c", SAM_WITH_GRAPH_LIKE_MODULES], capture_output=True, text=True, timeout=600,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout[-2000:] + done.stderr[-3000:]
    assert registry.workload("sam-predict", "tiny").batch_size >= 2  # the cell's own batch loops the decoder too
