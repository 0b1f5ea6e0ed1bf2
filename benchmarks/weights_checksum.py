"""A fit's initial-weights checksum: one loop (read a weight back, hash it, the next) against fwbench's
(fwbench.workloads.weights_sha256: the next weight read back while a second thread hashes the one before).

    python benchmarks/weights_checksum.py --json benchmarks/results/DATE-MACHINE/weights-checksum.json
    python benchmarks/weights_checksum.py --render FILE.json    # the Markdown docs/gpu-kit.md shows

Synthetic weights shaped like a decoder LLM's, scaled down (one embedding of a quarter of the bytes, the rest in
equal layers), --mib in all. Reading a weight back is stood in for by a copy of its bytes into new host memory (on a
GPU: the device-to-host copy each framework makes in fwbench's weight_bytes); no GPU here. Both ways must give the
same digest (checked). Alternating repeats, each way's median printed; on a machine of more cores or with a slower
read-back the side-by-side gain differs.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "runner"), str(REPO / "benchmarks")]

import measurement_log  # noqa: E402

from fwbench.workloads import weights_sha256  # noqa: E402


def synthetic_weights(mib: int, layers: int) -> list[np.ndarray]:
    total = mib << 20
    embedding = total // 4
    layer = (total - embedding) // layers
    rng = np.random.default_rng(0)
    return [rng.integers(0, 255, size=size, dtype=np.uint8) for size in [embedding] + [layer] * layers]


def read_back(arrays: list[np.ndarray]):
    """(dtype, shape, bytes) per weight, each bytes a fresh copy: the stand-in for the device-to-host copy."""
    for array in arrays:
        yield "bfloat16", (array.size // 2,), np.array(array, copy=True)


def one_loop(arrays: list[np.ndarray]) -> str:
    digest = hashlib.sha256()
    for dtype, shape, data in read_back(arrays):
        digest.update(f"{dtype}{list(shape)};".encode())
        digest.update(data)
    return digest.hexdigest()


def measure(args) -> dict:
    arrays = synthetic_weights(args.mib, args.layers)
    seconds: dict[str, list[float]] = {"one loop": [], "side by side": []}
    digests = set()
    for _ in range(args.repeats):
        for name, way in (("one loop", one_loop), ("side by side", lambda a: weights_sha256(read_back(a)))):
            start = time.perf_counter()
            digests.add(way(arrays))
            seconds[name].append(time.perf_counter() - start)
    if len(digests) != 1:
        raise SystemExit("error: the two ways gave different digests")
    return {name: statistics.median(values) for name, values in seconds.items()} | {"runs": seconds}


def render(found: dict) -> str:
    row = found["rows"][0]
    loop, side = row["one loop s"], row["side by side s"]
    return (f"| weights | one loop s | side by side s | one loop / side by side |\n|---|---|---|---|\n"
            f"| {row['mib']} MiB in {row['tensors']} tensors | {loop:.2f} | {side:.2f} | {loop / side:.2f} |\n\n"
            f"Measured {found['date']} ({found['utc']} UTC) on {found['machine']}, the median of "
            f"{row['repeats']} alternating repeats each; reading back stood in for by a host copy (no GPU here).")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="the weights' bytes in all (MiB)")
    parser.add_argument("--layers", type=int, default=28, help="the layers beside the embedding")
    parser.add_argument("--repeats", type=int, default=5)
    measurement_log.add_output_options(parser, "docs/gpu-kit.md")
    args = parser.parse_args(argv)
    if measurement_log.rendered(args, render):
        return 0
    started = measurement_log.now()
    found = measure(args)
    rows = [{"mib": args.mib, "tensors": args.layers + 1, "repeats": args.repeats, "one loop s": found["one loop"],
             "side by side s": found["side by side"], "runs": found["runs"]}]
    record = measurement_log.record("weights_checksum", rows, started=started, argv=argv,
                                    settings={"mib": args.mib, "layers": args.layers, "repeats": args.repeats})
    print(render(record))
    if args.json:
        measurement_log.write(args.json, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
