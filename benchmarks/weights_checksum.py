"""A fit's initial-weights checksum, four ways: the H200 windows' one loop (read a weight back, hash it in one SHA-256
stream, the next), stop 58's side by side (the same stream, hashed in a second thread while the next weight is read
back), and fwbench's (fwbench.workloads.weights_sha256: every 16 MiB piece hashed on its own, on every core), with
each weight read back whole into fresh host memory (as keras3-jax does) or piece by piece into reused host buffers
(as the torch stacks do on a GPU: DeviceBytes).

    python benchmarks/weights_checksum.py --json benchmarks/results/DATE-MACHINE/weights-checksum.json
    python benchmarks/weights_checksum.py --render FILE.json    # the Markdown docs/gpu-kit.md shows

Synthetic weights shaped like a decoder LLM's, scaled down (one embedding of a quarter of the bytes, the rest in
equal layers), --mib in all. Reading a weight back is stood in for by a copy of its bytes into host memory (on a
GPU: the device-to-host copy each framework makes); no GPU here. The two stream ways must give one digest and the
two piece ways another (checked). Alternating repeats, each way's median printed; on a machine of more cores, or
where touching new memory costs otherwise, the gains differ.
"""

from __future__ import annotations

import argparse
import hashlib
import queue
import statistics
import sys
import threading
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
    """(dtype, shape, bytes) per weight, each bytes a fresh copy: the stand-in for a whole device-to-host copy."""
    for array in arrays:
        yield "bfloat16", (array.size // 2,), np.array(array, copy=True)


class HostCopy:
    """A weight read back piece by piece into the buffer the checksum gives (a ChunkReader), as DeviceBytes does."""

    def __init__(self, array: np.ndarray):
        self.array, self.nbytes = array, array.size

    def read_into(self, offset: int, out: np.ndarray) -> None:
        np.copyto(out, self.array[offset:offset + out.size])


def read_in_pieces(arrays: list[np.ndarray]):
    for array in arrays:
        yield "bfloat16", (array.size // 2,), HostCopy(array)


def one_loop(arrays: list[np.ndarray]) -> str:
    digest = hashlib.sha256()
    for dtype, shape, data in read_back(arrays):
        digest.update(f"{dtype}{list(shape)};".encode())
        digest.update(data)
    return digest.hexdigest()


def side_by_side(arrays: list[np.ndarray]) -> str:
    """Stop 58's weights_sha256: one stream, hashed in a second thread while the next weight is read back."""
    digest = hashlib.sha256()
    pending: queue.Queue = queue.Queue(maxsize=2)

    def hash_pending() -> None:
        while (item := pending.get()) is not None:
            digest.update(item[0])
            digest.update(item[1])

    hasher = threading.Thread(target=hash_pending)
    hasher.start()
    for dtype, shape, data in read_back(arrays):
        pending.put((f"{dtype}{list(shape)};".encode(), data))
    pending.put(None)
    hasher.join()
    return digest.hexdigest()


WAYS = {
    "one loop": (one_loop, "stream"),
    "side by side": (side_by_side, "stream"),
    "pieces, fresh copies": (lambda arrays: weights_sha256(read_back(arrays)), "pieces"),
    "pieces, reused buffers": (lambda arrays: weights_sha256(read_in_pieces(arrays)), "pieces"),
}


def measure(args) -> dict:
    arrays = synthetic_weights(args.mib, args.layers)
    seconds: dict[str, list[float]] = {name: [] for name in WAYS}
    digests: dict[str, set] = {"stream": set(), "pieces": set()}
    for _ in range(args.repeats):
        for name, (way, kind) in WAYS.items():
            start = time.perf_counter()
            digests[kind].add(way(arrays))
            seconds[name].append(time.perf_counter() - start)
    if any(len(found) != 1 for found in digests.values()):
        raise SystemExit("error: two ways of one digest gave different digests")
    return {name: statistics.median(values) for name, values in seconds.items()} | {"runs": seconds}


def way_seconds(row: dict) -> dict[str, float]:
    """Each way's median seconds; a file of 2026-11-28 measured only the two stream ways."""
    return row.get("ways") or {"one loop": row["one loop s"], "side by side": row["side by side s"]}


def render(found: dict) -> str:
    row = found["rows"][0]
    ways = way_seconds(row)
    loop = ways["one loop"]
    lines = [f"| weights ({row['mib']} MiB in {row['tensors']} tensors) | s | one loop / this way |", "|---|---|---|"]
    lines += [f"| {name} | {value:.2f} | {loop / value:.2f} |" for name, value in ways.items()]
    return ("\n".join(lines) + "\n\n"
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
    rows = [{"mib": args.mib, "tensors": args.layers + 1, "repeats": args.repeats,
             "ways": {name: found[name] for name in WAYS}, "runs": found["runs"]}]
    record = measurement_log.record("weights_checksum", rows, started=started, argv=argv,
                                    settings={"mib": args.mib, "layers": args.layers, "repeats": args.repeats})
    print(render(record))
    if args.json:
        measurement_log.write(args.json, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
