"""Harness overhead: the harness's ms/step vs a minimal hand-written synced loop, same model, same process.

    python benchmarks/harness_overhead.py [--stack native-torch] [--task TASK] [--steps 50]
    python benchmarks/harness_overhead.py --stack keras3-jax        # a Keras backend

Runs itself inside the stack's local environment (built if needed). Rounds alternate harness and
hand loop so drift (thermal, other load) hits both alike; prints the medians and their ratio.
Target: ratio <= 1.02.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runner"))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="native-torch")
    parser.add_argument("--task", default=None,
                        help="a task the harness loops itself (default: bert-predict on torch, "
                             "stable_diffusion-predict on Keras, whose fit/predict loop is Keras's own)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def reexec_in_stack_environment(args) -> int:
    from fwbench.engines import cell_environment
    from fwbench.engines.local import StackEnvironment
    from fwbench.core.spec import CellSpec

    environment = StackEnvironment(args.stack)
    environment.build()
    spec = CellSpec(stack=args.stack, task=args.task, preset="tiny", compile_mode="none", data_dir="",
                    steps=args.steps, threads=os.cpu_count() or 1)
    argv = [str(environment.python), __file__, "--inside", *sys.argv[1:]]
    return subprocess.call(argv, env=cell_environment(spec))


def measure(args) -> None:
    from fwbench.core import data, registry
    from fwbench.harness import backends
    from fwbench.harness.clock import StepClock, run_loop
    from fwbench.core.spec import CellSpec
    from fwbench.workloads import CellContext, StepCell, check_cell
    import importlib

    stack = registry.get_stack(args.stack)
    workload = registry.workload(args.task, "tiny")
    data_dir = Path(tempfile.mkdtemp(prefix="fwbench-overhead-"))
    data.generate(data_dir, "tiny", tasks=[args.task])
    arrays, _, _ = data.load(data_dir, "tiny", args.task)
    spec = CellSpec(stack=stack.id, task=args.task, preset="tiny", compile_mode=stack.compile_modes[0],
                    data_dir=str(data_dir), steps=args.steps, warmup=2, threads=os.cpu_count() or 1)
    backend = backends.backend_for(stack.id)
    backend.configure(spec.threads, "default")
    module = importlib.import_module(f"fwbench.workloads.{stack.family}.{workload.task.model}")
    cell = check_cell(module.build(CellContext(spec=spec, workload=workload, arrays=arrays, backend=backend)),
                      module.CELLS, workload.task.kind, module.__name__)
    if not isinstance(cell, StepCell):
        sys.exit(f"{args.task} is framework-driven (drive); pick a task with a plain step, e.g. bert-predict")

    def harness_ms() -> float:
        clock = StepClock(backend.sync, spec.warmup, spec.steps)
        run_loop(clock, cell.step)
        return clock.ms_per_step()

    def hand_loop_ms() -> float:
        for _ in range(1 + spec.warmup):
            backend.sync(cell.step())
        start = time.perf_counter()
        for _ in range(spec.steps):
            backend.sync(cell.step())
        return 1000.0 * (time.perf_counter() - start) / spec.steps

    harness, hand = [], []
    for round_index in range(args.rounds):
        # Alternate which loop goes first, so neither always runs on a warmer cache.
        if round_index % 2:
            hand.append(hand_loop_ms())
            harness.append(harness_ms())
        else:
            harness.append(harness_ms())
            hand.append(hand_loop_ms())
    harness_median, hand_median = statistics.median(harness), statistics.median(hand)
    ratio = statistics.median(h / m for h, m in zip(harness, hand))
    print(f"stack={stack.id} task={args.task} steps={args.steps} rounds={args.rounds}")
    print(f"harness   ms/step median {harness_median:.4f}  (min {min(harness):.4f})")
    print(f"hand loop ms/step median {hand_median:.4f}  (min {min(hand):.4f})")
    print(f"ratio harness/hand (median of per-round ratios) = {ratio:.4f}  (target <= 1.02)")


def main() -> int:
    args = parse_args()
    if args.task is None:
        args.task = "bert-predict" if args.stack == "native-torch" else "stable_diffusion-predict"
    if args.inside:
        measure(args)
        return 0
    return reexec_in_stack_environment(args)


if __name__ == "__main__":
    sys.exit(main())
