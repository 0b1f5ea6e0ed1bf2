"""Compile that did not take effect is not reported as compiled: reduce-overhead rows need their CUDA graphs
replayed in the timed window (counted through torch.cuda.CUDAGraph.replay; here a stand-in graph class: this
machine has no GPU), and SD predict feeds its compiled UNet timesteps on the UNet's device."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fwbench.harness import backends
from fwbench.harness.clock import StepClock, run_loop
from fwbench.harness.energy import Probes

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("stats, steps, took", [
    ({"compiled_graphs": 3, "cudagraph_skips": 0, "cudagraph_replays": 10}, 10, True),
    ({"compiled_graphs": 3, "cudagraph_skips": None, "cudagraph_replays": 20}, 10, True),  # torch 2.2: no skip count
    ({"compiled_graphs": 3, "cudagraph_skips": 0, "cudagraph_replays": 9}, 10, False),  # a step ran without graphs
    ({"compiled_graphs": 3, "cudagraph_skips": 1, "cudagraph_replays": 10}, 10, False),  # a graph was skipped
    ({"compiled_graphs": 3, "cudagraph_skips": 2, "cudagraph_replays": 0}, 10, False),  # the CPU: no CUDA graphs
    ({"compiled_graphs": 3, "cudagraph_skips": 0, "cudagraph_replays": None}, 10, False),  # nothing counted
    ({"compiled_graphs": 0, "cudagraph_skips": 0, "cudagraph_replays": 10}, 10, False),  # nothing compiled
])
def test_reduce_overhead_takes_effect_only_with_a_replay_per_timed_step(stats, steps, took):
    assert backends.compile_took_effect("reduce-overhead", stats, steps) is took


def test_other_modes_take_effect_when_graphs_compiled():
    no_graphs = {"compiled_graphs": 2, "cudagraph_skips": 5, "cudagraph_replays": 0}
    assert backends.compile_took_effect("default", no_graphs, 10) is True
    assert backends.compile_took_effect("max-autotune", {**no_graphs, "compiled_graphs": 0}, 10) is False
    assert backends.compile_took_effect("none", no_graphs, 10) is None


class FakeCUDAGraph:
    """Stands in for torch.cuda.CUDAGraph: cudagraph trees call `graph.replay()` on instances of it."""

    def __init__(self):
        self.replayed = 0

    def replay(self):
        self.replayed += 1


def test_replays_are_counted_in_the_timed_window_only():
    graph_class = type("CUDAGraph", (FakeCUDAGraph,), {})
    graph = graph_class()  # made before the counter is installed, as a recorded graph may be
    counter = backends.CudaGraphReplayCounter(graph_class)
    clock = StepClock(lambda output: None, warmup=2, steps=4, probe=Probes(counter))
    run_loop(clock, lambda: graph.replay() or graph_class().replay())  # two graphs replayed per step
    assert graph.replayed == 7  # first step, 2 warm-up, 4 timed: every call still reaches the real replay
    assert counter.replays == 8  # the 4 timed steps, 2 replays each
    graph.replay()
    assert counter.replays == 8  # after the window: not counted


def test_backend_reports_replays_only_when_counting():
    torch = type("torch", (), {})()
    torch.cuda = type("cuda", (), {"CUDAGraph": type("CUDAGraph", (FakeCUDAGraph,), {})})()
    backend = object.__new__(backends.TorchBackend)
    backend.torch, backend._replay_counter = torch, None
    counter = backend.count_cudagraph_replays()
    assert backend.count_cudagraph_replays() is counter  # installed once: never a wrapper around a wrapper
    counter.start()
    torch.cuda.CUDAGraph().replay()
    counter.stop()
    assert counter.replays == 1


SD_SCHEDULER = """
import torch
from fwbench.workloads.torch.stable_diffusion import sd_v1_scheduler
scheduler = sd_v1_scheduler(4, "meta")
assert scheduler.timesteps.device == torch.device("meta"), scheduler.timesteps.device
print("ok")
"""


@pytest.mark.integration
def test_sd_scheduler_timesteps_are_on_the_unets_device():
    """The UNet's device stands in as "meta" (no GPU here): the timesteps must follow it, not stay on the CPU."""
    from tests.conftest import run_fwbench

    built = run_fwbench("env", "build", "native-torch")
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    python = run_fwbench("env", "path", "native-torch").stdout.strip()
    done = subprocess.run([python, "-c", SD_SCHEDULER], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT / "runner"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
