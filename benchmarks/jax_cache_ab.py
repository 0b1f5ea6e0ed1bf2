"""Does a program loaded from JAX's persistent compilation cache run as fast as one compiled in the process?

    <keras3-jax environment's python> benchmarks/jax_cache_ab.py --data DIR [--rounds 60] [--steps 500]

One process, keras3-jax's `tiny` BERT classifier forward (built by fwbench's own workload module from the cell's
inputs; the jitted call is model.stateless_call, what Keras's predict step runs), as three executables of the same
program: A compiled here, B serialized and loaded back (what the persistent cache stores and loads:
jax.experimental.serialize_executable), C compiled a second time (how far two compilations of one program differ).
Rounds of one block of --steps synced calls each, in a rotating order; prints each one's mean ms per call and
block-to-block CV, and the ratios B/A, C/A with 95% intervals over the paired rounds. Everything else (threads,
allocator, process state) is shared, so a difference is the executable's own. Run it on a quiet machine only.
--json FILE also writes the figures with the date, machine, command and commit (benchmarks/measurement_log.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runner"))
os.environ.setdefault("KERAS_BACKEND", "jax")
ORDERS = ("ABC", "BCA", "CAB", "CBA", "ACB", "BAC")  # each executable first, middle and last alike


def ratio_text(numerator: list[float], denominator: list[float]) -> str:
    """Geometric mean of the paired rounds' ratios with its 95% interval (harness_noise.py's, beside this file)."""
    from harness_noise import ratio_interval

    ratio, low, high = ratio_interval(numerator, denominator)
    return f"{ratio:.4f} [{low:.4f}, {high:.4f}]"


def json_rows(times: dict[str, list[float]]) -> list[dict]:
    """The --json file's table: the two ratios with their 95% intervals."""
    from harness_noise import ratio_interval

    rows = []
    for name, label in (("B", "loaded/compiled (B/A)"), ("C", "compiled twice (C/A)")):
        ratio, low, high = ratio_interval(times[name], times["A"])
        rows.append({"ratio": label, "value": ratio, "value_low": low, "value_high": high})
    return rows


def json_figures(times: dict[str, list[float]], compile_s: float, load_s: float, jax_version: str) -> list[list]:
    figures = [["jax", jax_version], ["A's compile (s)", compile_s, ".2f"], ["B's load (s)", load_s, ".3f"]]
    for name, values in times.items():
        figures += [[f"{name}: ms per call", statistics.fmean(values), ".4f"],
                    [f"{name}: block CV", statistics.stdev(values) / statistics.fmean(values), ".1%"]]
    return figures


def build_forward(data_dir: Path):
    """The model of keras3-jax's bert-predict at tiny, its inputs, and the jitted forward."""
    import jax
    import numpy as np

    from fwbench.core import data, registry
    from fwbench.core.spec import CellSpec
    from fwbench.harness import backends
    from fwbench.workloads import CellContext

    stack, workload = registry.get_stack("keras3-jax"), registry.workload("bert-predict", "tiny")
    arrays, _, _ = data.load(data_dir, "tiny", "bert-predict")
    spec = CellSpec(stack=stack.id, task="bert-predict", preset="tiny", compile_mode=stack.compile_modes[0],
                    data_dir=str(data_dir), steps=100, threads=os.cpu_count() or 1)
    ctx = CellContext(spec=spec, workload=workload, arrays=arrays, backend=backends.backend_for(stack.id, None))
    cell = importlib.import_module(f"fwbench.workloads.{stack.family}.{workload.task.model}").build(ctx)
    model = cell.model
    batch = next(iter(cell.dataset))
    inputs = {name: jax.numpy.asarray(np.asarray(value)) for name, value in batch.items()}
    trainable = [variable.value for variable in model.trainable_variables]
    non_trainable = [variable.value for variable in model.non_trainable_variables]

    def forward(trainable, non_trainable, inputs):
        return model.stateless_call(trainable, non_trainable, inputs, training=False)[0]

    return forward, (trainable, non_trainable, inputs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, type=Path, help="a folder made by `fwbench data --preset tiny`")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--steps", type=int, default=500, help="synced calls per block (default 500)")
    parser.add_argument("--json", type=Path, help="also write the figures here (their place: benchmarks/results/"
                        "<date>-<machine>/jax-cache-ab.json)")
    args = parser.parse_args()
    if args.rounds < 2 or args.steps < 1:
        parser.error("--rounds must be at least 2 and --steps at least 1")

    import jax
    import numpy as np
    from jax.experimental import serialize_executable

    import measurement_log

    started = measurement_log.now()
    forward, call_args = build_forward(args.data)
    started = time.perf_counter()
    compiled = jax.jit(forward).lower(*call_args).compile()
    compile_s = time.perf_counter() - started
    started = time.perf_counter()
    loaded = serialize_executable.deserialize_and_load(*serialize_executable.serialize(compiled))
    load_s = time.perf_counter() - started
    again = jax.jit(forward).lower(*call_args).compile()  # a new jit object: compiled anew, not a lookup
    executables = {"A": compiled, "B": loaded, "C": again}
    reference = np.asarray(compiled(*call_args))
    for name, executable in executables.items():
        if not np.allclose(np.asarray(executable(*call_args)), reference, atol=1e-5):
            sys.exit(f"executable {name} computes something else than A")
        for _ in range(20):  # warm each one alike
            executable(*call_args).block_until_ready()

    def block_ms(executable) -> float:
        started = time.perf_counter()
        for _ in range(args.steps):
            executable(*call_args).block_until_ready()
        return 1000.0 * (time.perf_counter() - started) / args.steps

    times: dict[str, list[float]] = {name: [] for name in executables}
    for round_index in range(args.rounds):
        for name in ORDERS[round_index % len(ORDERS)]:
            times[name].append(block_ms(executables[name]))

    from datetime import datetime, timezone

    from fwbench.harness.envinfo import cpu_model

    print(f"jax cache A/B, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {cpu_model()}, {os.cpu_count()} cores; "
          f"jax {jax.__version__}; {args.rounds} rounds of {args.steps} synced calls per executable")
    print(f"A compiled here ({compile_s:.2f} s), B loaded from A's serialized form ({load_s:.3f} s), C compiled again")
    for name, values in times.items():
        print(f"{name}: {statistics.fmean(values):.4f} ms per call, block CV {statistics.stdev(values) / statistics.fmean(values):.1%}")
    print(f"B/A {ratio_text(times['B'], times['A'])}   C/A {ratio_text(times['C'], times['A'])}   (95%)")
    if args.json:
        measurement_log.write(args.json, measurement_log.record(
            "jax_cache_ab.py", json_rows(times), started=started,
            settings={"rounds": args.rounds, "synced calls a block": args.steps},
            figures=json_figures(times, compile_s, load_s, jax.__version__)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
