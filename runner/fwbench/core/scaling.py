"""Data-parallel scaling as an axis of the fit cells (`--devices N`, `--global-batch G`), defined once.

  weak scaling (the default)  each device gets the task's batch: per-device batch = b, global batch = N x b.
  strong scaling              `--global-batch G`: the global batch is G, split evenly: per-device batch = G / N.

Each stack runs its own idiomatic data parallelism (docs/workloads.md#data-parallel-scaling); a stack or task that
cannot is an `unsupported` row with the reason, never a one-device row in its place.

Plain Python and numpy: the runner, the cell and the aggregator import it.
"""

from __future__ import annotations

from typing import Any

from fwbench.core import registry

DEFAULT_DEVICES = 1

NOT_A_FIT = "data-parallel variants exist for fit tasks"


def comm_backend(stack_id: str, on_gpu: bool) -> str | None:
    """The collectives the stack's data parallelism reduces gradients with on this device (None: none)."""
    parallel = registry.get_stack(stack_id).data_parallel
    if parallel is None:
        return None
    return parallel.comm_backend_gpu if on_gpu else parallel.comm_backend_cpu


def unsupported_reason(stack_id: str, task_id: str, task_kind: str, devices: int,
                       global_batch: int | None = None) -> str | None:
    """Why this stack cannot run this task on `devices` devices at this global batch (None: it can, or it is the
    one-device cell at the task's batch). A --global-batch on one device is the strong-scaling baseline: it needs the
    data-parallel variant too (the other cells run the task's batch whatever it says)."""
    if devices == DEFAULT_DEVICES and global_batch is None:
        return None
    asked = f"--devices {devices}" + (f" --global-batch {global_batch}" if global_batch is not None else "")
    if task_kind != "fit":
        return f"{asked}: {NOT_A_FIT} (this is a {task_kind} task)"
    stack = registry.get_stack(stack_id)
    if stack.data_parallel is None:
        return f"{asked}: " + (stack.no_data_parallel or f"no data-parallel variant of stack {stack_id} in fwbench")
    # A model file's fit (docs/your-model.md) runs data-parallel as the registry's fits do.
    if task_id not in stack.data_parallel.tasks and registry.model_file_task(task_id) is None:
        return (f"{asked}: a data-parallel {task_id} on {stack_id} is not yet implemented in fwbench "
                f"(it has: {', '.join(stack.data_parallel.tasks)})")
    return None


def check(devices: int, global_batch: int | None) -> None:
    """ValueError (one line) unless devices >= 1 and the global batch, if given, splits evenly over them."""
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ValueError(f"--devices must be an integer of at least 1, got {devices!r}")
    if global_batch is None:
        return
    if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
        raise ValueError(f"--global-batch must be an integer of at least 1, got {global_batch!r}")
    if global_batch % devices:
        raise ValueError(f"--global-batch {global_batch} does not split evenly over --devices {devices}")


def batches(task_batch: int, devices: int, global_batch: int | None) -> tuple[int, int]:
    """(per-device batch, global batch): weak scaling keeps the task's batch per device; strong splits G."""
    check(devices, global_batch)
    if global_batch is None:
        return task_batch, task_batch * devices
    return global_batch // devices, global_batch


def global_rows(arrays: dict[str, Any], rows: int) -> dict[str, Any]:
    """The shared batch grown (or cut) to `rows` rows along axis 0, for a global batch. Copy k of the batch has
    each sample rotated by k along its second axis (token ids and padding mask alike: the sequence starts k
    positions later; 1-D arrays such as labels stay), so the copies are distinct samples: a device's share of a
    weak-scaling global batch has gradients of its own (a data-parallel step that did not reduce them would
    show), while every input is still the shared, checksummed data. rows == the batch: unchanged."""
    import numpy as np

    have = len(next(iter(arrays.values())))
    if rows == have:
        return dict(arrays)
    copies = -(-rows // have)
    return {key: np.concatenate([np.roll(value, k, axis=1) if value.ndim > 1 else value
                                 for k in range(copies)])[:rows]
            for key, value in arrays.items()}
