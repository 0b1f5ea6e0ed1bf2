"""The plain side of benchmarks/harness_noise.py: one cell's model, timed by a bare loop in a process of its own.

    <stack environment's python> benchmarks/plain_cell.py --stack native-torch --task bert-predict --data DIR

It builds the cell's model from the cell's inputs with fwbench's own workload module (so both sides time the same
network on the same bytes and the same call), and nothing else of fwbench: no thread or precision configuration
(the framework's defaults), no probes, no record, no garbage-collector handling. The loop is what a careful
hand-written script does: the first step and the warm-up steps untimed, each synced; then the timed steps, each
synced on its output, one perf_counter read per step. Prints one JSON line: {"ms_per_step": ..., ...}, with the
process's context switches in the timed window (getrusage at its two edges, as a cell's row has them).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runner"))


def context_switches() -> dict[str, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"involuntary": usage.ru_nivcsw, "voluntary": usage.ru_nvcsw}


class PlainClock:
    """begin()/end(output) around each step, as a Keras callback or a loop calls them; syncs on each output."""

    def __init__(self, sync, warmup: int, steps: int):
        self.sync, self.first_timed, self.total = sync, 1 + warmup, 1 + warmup + steps
        self.index, self.marks = 0, []
        self.switches: list[dict[str, int]] = []  # at the window's first and last clock reads

    @property
    def done(self) -> bool:
        return self.index >= self.total

    def begin(self) -> None:
        if self.index == self.first_timed:
            self.switches.append(context_switches())
            self.marks.append(time.perf_counter())

    def end(self, output=None) -> None:
        self.sync(output)
        if self.index >= self.first_timed:
            self.marks.append(time.perf_counter())
        self.index += 1
        if self.index == self.total:
            self.switches.append(context_switches())

    def window_switches(self) -> dict[str, int]:
        first, last = self.switches
        return {kind: last[kind] - first[kind] for kind in first}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--data", required=True, type=Path, help="a folder made by `fwbench data --preset tiny`")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--gc-freeze", action="store_true", help="a candidate of harness_noise.py: gc.collect() "
                        "and gc.freeze() once the model is built")
    parser.add_argument("--configure-threads", type=int, metavar="N", help="a candidate of harness_noise.py: the "
                        "harness backend's configure(N), the thread counts a fwbench cell sets")
    parser.add_argument("--compile-cache", type=Path, metavar="DIR", help="a candidate of harness_noise.py: the "
                        "framework's persistent compilation cache at DIR, turned on as a fwbench cell turns it on")
    parser.add_argument("--import-cell", action="store_true", help="a candidate of harness_noise.py: fwbench's cell "
                        "module imported first (everything a cell process imports: probes, records, envinfo)")
    parser.add_argument("--cell-build", action="store_true", help="a candidate of harness_noise.py: the model built by "
                        "the cell's own build_cell() (its checks, backend set-up, build and sync), timed by the bare loop")
    parser.add_argument("--cell-clock", action="store_true", help="a candidate of harness_noise.py: the model built "
                        "plainly, timed by the cell's own time_cell() (its clock, with the probes at the window's edges)")
    args = parser.parse_args()
    if args.import_cell:
        import fwbench.harness.cell  # noqa: F401

    from fwbench.core import data, registry
    from fwbench.core.spec import CellSpec
    from fwbench.harness import backends
    from fwbench.workloads import CellContext, StepCell

    stack = registry.get_stack(args.stack)
    workload = registry.workload(args.task, "tiny")
    arrays, _, _ = data.load(args.data, "tiny", args.task)
    spec = CellSpec(stack=stack.id, task=args.task, preset="tiny", compile_mode=stack.compile_modes[0],
                    data_dir=str(args.data), steps=args.steps, warmup=args.warmup, threads=os.cpu_count() or 1)
    if args.cell_build:  # the cell's whole build, on the spec the cell process gets
        from fwbench.harness import cell as harness_cell

        spec = dataclasses.replace(spec, device="cpu", device_setting="cpu")
        built = harness_cell.build_cell(spec, harness_cell.PhaseTimer())
        backend, cell, ctx = built.backend, built.cell, built.ctx
    else:
        backend = backends.backend_for(stack.id, args.configure_threads)  # imports the framework (no thread limit)
        if args.compile_cache:  # the cell's order: its compile cache, then configure()
            backend.use_compile_cache(args.compile_cache, spec.compile_mode)
        if args.configure_threads:  # by default nothing is configured
            backend.configure(args.configure_threads, "published")
        module = importlib.import_module(f"fwbench.workloads.{stack.family}.{workload.task.model}")
        ctx = CellContext(spec=spec, workload=workload, arrays=arrays, backend=backend)
        cell = module.build(ctx)
    if args.gc_freeze:
        import gc

        gc.collect()
        gc.freeze()
    if args.cell_clock:  # the cell's timed steps: its StepClock, probes started and stopped at the window's edges
        from fwbench.harness import cell as harness_cell

        timed = harness_cell.time_cell(harness_cell.Built(stack, ctx, cell, None, 0, None, 0.0))
        ms_per_step = timed.clock.ms_per_step()
        switches = timed.contention.context_switches()
    else:
        clock = PlainClock(backend.sync, args.warmup, args.steps)
        if isinstance(cell, StepCell):
            while not clock.done:
                clock.begin()
                clock.end(cell.step())
        else:
            cell.drive(clock)  # Keras fit/predict or the HF Trainer: their own loop calls begin/end
        ms_per_step = 1000.0 * (clock.marks[-1] - clock.marks[0]) / args.steps
        switches = clock.window_switches()
    print(json.dumps({"ms_per_step": ms_per_step, "steps": args.steps, "warmup": args.warmup,
                      "context_switches": switches}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
