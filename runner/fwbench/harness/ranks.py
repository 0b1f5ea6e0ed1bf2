"""Data-parallel cells in N processes (native-torch DistributedDataParallel): the cell process is the launcher, as
torchrun would be, and each rank is a spawned process that builds and times the cell itself.

A rank gets the rendezvous variables torch.distributed reads (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT), its
own share of the cell's CPU cores where there are enough to go round, and returns what it measured. The row is
rank 0's, timed as the slowest rank: every clock read of every rank follows a barrier across ranks (the harness's
sync), so the ranks' windows line up and the slowest rank's time is the step's.

Plain Python (multiprocessing, and NVML through the energy module): the framework is imported by the ranks only.
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queues
import socket
import time
from typing import Any, Callable

from fwbench.core.schema import ENERGY_COLUMNS
from fwbench.harness import energy

LAUNCHER_ENV = "FWBENCH_RANK_LAUNCHER"  # the launcher's pid: a rank does not count it as a competing cell


class RankFailed(Exception):
    """A rank failed: the row takes its status (error, oom, unsupported...) and its message."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def core_shares(cores: list[int], ranks: int) -> list[list[int]]:
    """Each rank's cores: the cell's cores split into equal disjoint shares (the remainder left idle, so no rank
    has more than another); with fewer cores than ranks, every rank may use every core (shared, not split)."""
    if len(cores) < ranks:
        return [list(cores) for _ in range(ranks)]
    size = len(cores) // ranks
    return [cores[rank * size:(rank + 1) * size] for rank in range(ranks)]


def rank_environment(rank: int, ranks: int, port: int) -> dict[str, str]:
    """The rendezvous variables torch.distributed reads (set by the rank itself, in its own process)."""
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(ranks), "LOCAL_WORLD_SIZE": str(ranks),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


def local_rank() -> int | None:
    """This process's device ordinal as a rank of a data-parallel cell (LOCAL_RANK, where WORLD_SIZE > 1); None
    when it is not one (one device, or one process driving every device)."""
    world, rank = os.environ.get("WORLD_SIZE", ""), os.environ.get("LOCAL_RANK", "")
    if not (world.isdigit() and int(world) > 1 and rank.isdigit()):
        return None
    return int(rank)


def launch(target: Callable[..., None], spec_json: str, ranks: int, *, work_dir: str,
           timeout_s: float) -> list[dict[str, Any]]:
    """Run target(spec_json, rank, world=, port=, cores=, work_dir=, results=) in `ranks` spawned processes; each puts
    (rank, status, payload) on the queue: payload is its measured fields when status is ok, else its message.
    Returns the ranks' fields in rank order; raises RankFailed for the first failing rank (by rank)."""
    context = multiprocessing.get_context("spawn")  # a fresh interpreter per rank: no framework state forked
    results: Any = context.Queue()
    port = free_port()
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux: no pinning
        cores = []
    shares = core_shares(cores, ranks) if cores else [[] for _ in range(ranks)]
    processes = [context.Process(target=target, args=(spec_json, rank), daemon=True,
                                 kwargs={"world": ranks, "port": port, "cores": shares[rank], "work_dir": work_dir,
                                         "results": results}) for rank in range(ranks)]
    # The launcher's own pid, read here: inside a rank os.getpid() is the rank's, and the launcher (a cell process
    # that only waits) would count as a competing cell on every row. Spawned ranks inherit this environment.
    os.environ[LAUNCHER_ENV] = str(os.getpid())
    for process in processes:
        process.start()
    received: dict[int, tuple[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(received) < ranks:
            try:
                rank, status, payload = results.get(timeout=1.0)
                received[rank] = (status, payload)
                continue
            except queues.Empty:
                pass
            dead = [rank for rank, p in enumerate(processes) if rank not in received and not p.is_alive()]
            if dead:
                # A rank that died without a word (killed, a crash in the framework): its peers would wait at the
                # next barrier until the timeout.
                raise RankFailed("error", f"rank {dead[0]} of {ranks} exited (code {processes[dead[0]].exitcode}) "
                                          "without a result")
            if time.monotonic() > deadline:
                raise RankFailed("timeout", f"the {ranks} ranks did not all finish within {timeout_s:g} s")
        for rank in sorted(received):
            status, payload = received[rank]
            if status != "ok":
                raise RankFailed(status, f"rank {rank} of {ranks}: {payload}")
        return [received[rank][1] for rank in range(ranks)]
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()


def merge(fields: list[dict[str, Any]], global_batch: int) -> dict[str, Any]:
    """Rank 0's fields, timed as the slowest rank: ms_per_step the largest of the ranks', each timed step the
    largest of that step's times, samples/s of the global batch at that pace; every rank's ms/step in extra.
    What each rank read of its own device is the cell's over all of them: energy summed over the ranks' GPUs (or
    none, energy.combine), other processes on any of them, the largest device's peak memory."""
    merged = {key: value for key, value in fields[0].items() if key not in ENERGY_COLUMNS}
    merged.pop("cpu_set", None)  # the row's cpu_set stays the cell's (all its ranks' cores); each rank's is in extra
    ms = [f["ms_per_step"] for f in fields]
    merged["ms_per_step"] = max(ms)
    per_step = [f.get("step_ms") for f in fields]
    if all(steps is not None for steps in per_step):
        merged["step_ms"] = [max(times) for times in zip(*per_step)]
    merged["first_step_s"] = max(f["first_step_s"] for f in fields)
    merged["setup_s"] = max(f["setup_s"] for f in fields)
    merged["samples_per_s"] = global_batch * 1000.0 / merged["ms_per_step"]
    # A rank that lost time to others on its cores makes the step slow: the row is busy if any rank was.
    merged["busy"] = any(bool(f.get("busy")) for f in fields)
    reasons = [f"rank {rank}: {f['busy_reasons']}" for rank, f in enumerate(fields) if f.get("busy_reasons")]
    merged["busy_reasons"] = "; ".join(reasons) or fields[0].get("busy_reasons")
    for column in ("gpu_other_processes", "gpu_other_mem_bytes"):  # each rank counted those on its own GPU
        counts = [f[column] for f in fields if f.get(column) is not None]
        if counts:
            merged[column] = sum(counts)
    peaks = [f.get("peak_mem_bytes") for f in fields]
    if all(peak is not None for peak in peaks):
        merged["peak_mem_bytes"] = max(peaks)  # per device: what the fullest device had to hold
    extra = {**fields[0].get("extra", {}), "rank_ms_per_step": ms, "rank_cpu_sets": [f.get("cpu_set") for f in fields],
             "rank_peak_mem_bytes": peaks}
    readings = [{k: f[k] for k in ENERGY_COLUMNS if k in f} for f in fields]
    if any(readings):  # GPU ranks (a CPU rank has no energy columns)
        merged.update(energy.combine(readings))
        extra.update(energy.per_gpu(readings, [f.get("gpu_uuid") for f in fields]))
    busy = [f.get("extra", {}).get("gpu_busy") for f in fields]
    if all(busy):  # each rank sampled its own GPU
        extra["gpu_busy"] = energy.combine_busy(busy)
    merged["extra"] = extra
    return merged
