"""Which GPU a cell uses, in NVML's terms: its index, UUID, name, and whether it is a MIG slice.

Every NVML reading about "the cell's GPU" (energy, clocks, other processes, the device model) starts here, so
that they all describe the GPU the framework really runs on. The host index is not that GPU's name everywhere:
inside a container NVML numbers only the container's GPUs (the cell's is index 0 there), and
CUDA_VISIBLE_DEVICES may name GPUs by UUID ("GPU-8f3...", a unique prefix is enough for CUDA) or MIG slices
("MIG-<uuid>", or the old "MIG-GPU-<gpu uuid>/<gpu instance>/<compute instance>").

The first CUDA_VISIBLE_DEVICES entry says which GPU the framework's device 0 is (its k-th entry, device k: a cell
given several GPUs runs on the first N): a number is an NVML index (the engines set CUDA_DEVICE_ORDER=PCI_BUS_ID,
which numbers GPUs as NVML does), a UUID is looked up by UUID, a MIG id is that slice; unset, device k is NVML's
GPU k. A UUID the framework reports (torch) is checked against that and wins where they disagree: it is the device
the steps ran on.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from fwbench.harness.nvml import NvmlSession, guarded, text

NVML_DEVICE_MIG_ENABLE = 1


@dataclass(frozen=True)
class CellGpu:
    index: int | None  # NVML index in this process's view (a MIG slice: its GPU's)
    uuid: str | None  # the physical GPU's NVML UUID, "GPU-..."
    name: str | None  # NVML name (a MIG slice: the slice's, e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb")
    mig: bool = False  # a MIG slice: NVML's energy counter and the datasheet peaks are the whole GPU's
    mig_uuid: str | None = None  # the slice's own UUID, "MIG-...", when NVML could say which slice
    found_by: str = ""  # what named it (CUDA_VISIBLE_DEVICES, the framework's UUID, ...)

    @property
    def device_uuid(self) -> str | None:
        """The row's gpu_uuid: the slice's UUID for a MIG slice, else the GPU's."""
        return self.mig_uuid or self.uuid


def first_visible_entry(visible: str | None) -> str | None:
    """The first CUDA_VISIBLE_DEVICES entry (the framework's device 0); None when unset or empty."""
    return visible_entry(visible, 0)


def visible_entry(visible: str | None, position: int) -> str | None:
    """The CUDA_VISIBLE_DEVICES entry of the framework's device `position`; None when unset or empty, or when it
    names fewer devices (_is_unset tells the two apart)."""
    if visible is None:
        return None
    entries = [part.strip() for part in visible.split(",")]
    return (entries[position] or None) if position < len(entries) else None


def _is_unset(visible: str | None) -> bool:
    return first_visible_entry(visible) is None


def framework_gpu_uuid(position: int = 0) -> str | None:
    """The UUID of the framework's device `position` as torch reports it ("GPU-..."), when torch has already
    started CUDA in this process (it is never started here); None otherwise (TensorFlow and JAX report no UUID)."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None
        uuid = str(torch.cuda.get_device_properties(position).uuid)
    except Exception:  # an old torch without .uuid, or a CUDA error: no cross-check
        return None
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def resolve_cell_gpu(session: NvmlSession | None = None, *, visible: str | None = None,
                     framework_uuid: str | None = None, position: int = 0) -> CellGpu | None:
    """The GPU the cell uses (see the module doc): the framework's device `position` (0 but for a data-parallel
    rank or a process driving several GPUs). visible: CUDA_VISIBLE_DEVICES (default: this process's).
    None when NVML cannot start or does not know that GPU."""
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if session is None:
        with NvmlSession() as own:
            return resolve_cell_gpu(own, visible=visible, framework_uuid=framework_uuid, position=position)
    if not session.is_open:
        return None
    entry = visible_entry(visible, position)
    if entry is None and not _is_unset(visible):  # CUDA_VISIBLE_DEVICES names fewer GPUs: no device `position`
        from_environment = None
    else:
        from_environment = session.query(lambda pynvml: _by_entry(pynvml, entry, position))
    if framework_uuid is None:
        return from_environment
    from_framework = session.query(lambda pynvml: _by_uuid_forms(pynvml, framework_uuid))
    if from_framework is None:
        return from_environment
    if from_environment is not None and from_environment.uuid == from_framework.uuid:
        return _found_by(from_environment, f"{from_environment.found_by}, confirmed by the framework's UUID")
    named = f"CUDA_VISIBLE_DEVICES named {entry!r}" if entry else "CUDA_VISIBLE_DEVICES is unset"
    return _found_by(from_framework, f"the framework's UUID ({named}, another GPU or none)")


def unresolved_gpu(visible: str | None = None, position: int = 0) -> CellGpu:
    """What CUDA_VISIBLE_DEVICES alone says of the cell's GPU (the framework's device `position`), where NVML could
    not (no UUID, no name): an index only when it names one, and whether it is a MIG slice."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    entry = visible_entry(visible, position)
    if entry is None and _is_unset(visible):
        which = "first GPU" if position == 0 else f"GPU {position}"
        return CellGpu(position, None, None, found_by=f"{which} (CUDA_VISIBLE_DEVICES unset; no NVML)")
    if entry is None:
        return CellGpu(None, None, None, found_by=f"CUDA_VISIBLE_DEVICES names no device {position} (no NVML)")
    index = int(entry) if entry.isdigit() else None
    return CellGpu(index, None, None, entry.startswith("MIG-"), found_by=f"CUDA_VISIBLE_DEVICES {entry} (no NVML)")


def nvml_handle(pynvml: Any, gpu: CellGpu, *, slice_only: bool = False) -> Any:
    """NVML's handle of the cell's GPU, by UUID where known (the index is this process's view only).
    slice_only: the MIG slice's own handle where there is one (its processes), else the GPU's."""
    if slice_only and gpu.mig_uuid:
        return _handle_by_uuid(pynvml, gpu.mig_uuid)
    if gpu.uuid:
        return _handle_by_uuid(pynvml, gpu.uuid)
    return pynvml.nvmlDeviceGetHandleByIndex(gpu.index or 0)


def entry_may_name(entry: str, gpu: CellGpu) -> bool:
    """Whether another process's CUDA_VISIBLE_DEVICES entry may name `gpu` (both in this process's NVML view).
    Anything not understood may: competition that cannot be ruled out counts."""
    entry = entry.strip()
    if entry.isdigit():  # an NVML index (the engines set PCI order)
        return gpu.index is None or int(entry) == gpu.index
    if entry.startswith("MIG-GPU-"):  # old MIG form: a slice of that GPU (which one is not compared)
        parent = entry[len("MIG-"):].split("/")[0]
        return gpu.uuid is None or gpu.uuid == parent
    if entry.startswith("MIG-"):  # a slice, which is never on a GPU used whole (MIG mode takes the GPU)
        return gpu.mig and (gpu.mig_uuid is None or gpu.mig_uuid.startswith(entry))
    if entry.startswith("GPU-"):  # CUDA accepts a unique prefix of the UUID
        return gpu.uuid is None or gpu.uuid.startswith(entry)
    return True


# --- lookups (each runs inside NvmlSession.query: an NVML error means "not found")

def _found_by(gpu: CellGpu, found_by: str) -> CellGpu:
    return CellGpu(gpu.index, gpu.uuid, gpu.name, gpu.mig, gpu.mig_uuid, found_by)


def _handle_by_uuid(pynvml: Any, uuid: str) -> Any:
    try:
        return pynvml.nvmlDeviceGetHandleByUUID(uuid)
    except TypeError:  # older pynvml wants bytes
        return pynvml.nvmlDeviceGetHandleByUUID(uuid.encode())


def _by_entry(pynvml: Any, entry: str | None, position: int = 0) -> CellGpu | None:
    if entry is None:  # unset: the framework's device k is NVML's GPU k (PCI order, as NVML numbers them)
        which = "first GPU" if position == 0 else f"GPU {position}"
        return _whole_gpu(pynvml, pynvml.nvmlDeviceGetHandleByIndex(position),
                          f"NVML's {which} (CUDA_VISIBLE_DEVICES unset)")
    if entry.isdigit():
        return _whole_gpu(pynvml, pynvml.nvmlDeviceGetHandleByIndex(int(entry)),
                          f"CUDA_VISIBLE_DEVICES index {entry}")
    if entry.startswith("MIG-GPU-"):
        return _old_form_slice(pynvml, entry)
    if entry.startswith("MIG-"):
        return _slice(pynvml, _handle_by_uuid(pynvml, entry), f"CUDA_VISIBLE_DEVICES MIG id {entry}")
    if entry.startswith("GPU-"):
        handle = _gpu_by_uuid_prefix(pynvml, entry)
        return None if handle is None else _whole_gpu(pynvml, handle, f"CUDA_VISIBLE_DEVICES UUID {entry}")
    return _whole_gpu(pynvml, pynvml.nvmlDeviceGetHandleByIndex(0),
                      f"NVML's first GPU (CUDA_VISIBLE_DEVICES entry {entry!r} not understood)")


def _by_uuid_forms(pynvml: Any, uuid: str) -> CellGpu | None:
    """The framework's UUID: a GPU's, else (torch formats every UUID as "GPU-") a MIG slice's."""
    bare = uuid.split("-", 1)[1] if uuid.startswith(("GPU-", "MIG-")) else uuid
    handle = _gpu_by_uuid_prefix(pynvml, f"GPU-{bare}")
    if handle is not None:
        return _whole_gpu(pynvml, handle, "the framework's UUID")
    try:
        return _slice(pynvml, _handle_by_uuid(pynvml, f"MIG-{bare}"), "the framework's UUID")
    except Exception:
        return None


def _gpu_by_uuid_prefix(pynvml: Any, uuid: str) -> Any:
    """The GPU with this UUID, or with the one UUID that starts with it (as CUDA accepts); None if none/several."""
    try:
        return _handle_by_uuid(pynvml, uuid)
    except Exception:
        pass
    matches = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        if text(pynvml.nvmlDeviceGetUUID(handle)).startswith(uuid):
            matches.append(handle)
    return matches[0] if len(matches) == 1 else None


def _whole_gpu(pynvml: Any, handle: Any, found_by: str) -> CellGpu:
    """A GPU named whole; in MIG mode the cell runs on a slice of it (its only one, where NVML shows one)."""
    index = guarded(lambda: int(pynvml.nvmlDeviceGetIndex(handle)))
    uuid = text(pynvml.nvmlDeviceGetUUID(handle))
    name = guarded(lambda: text(pynvml.nvmlDeviceGetName(handle)))
    mode = guarded(lambda: pynvml.nvmlDeviceGetMigMode(handle))
    if not mode or mode[0] != NVML_DEVICE_MIG_ENABLE:
        return CellGpu(index, uuid, name, False, None, found_by)
    slices = guarded(lambda: _mig_handles(pynvml, handle), [])
    if len(slices) == 1:
        gpu = _slice(pynvml, slices[0], found_by)
        return CellGpu(index, uuid, gpu.name, True, gpu.mig_uuid, f"{found_by}: a GPU in MIG mode, its one slice")
    return CellGpu(index, uuid, name, True, None, f"{found_by}: a GPU in MIG mode")


def _mig_handles(pynvml: Any, handle: Any) -> list[Any]:
    found = []
    for position in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            found.append(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, position))
        except Exception:  # NVML_ERROR_NOT_FOUND: no slice at this position
            continue
    return found


def _slice(pynvml: Any, mig_handle: Any, found_by: str) -> CellGpu:
    parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig_handle)
    parent_name = guarded(lambda: text(pynvml.nvmlDeviceGetName(parent)))
    name = guarded(lambda: text(pynvml.nvmlDeviceGetName(mig_handle)))
    if not name or "MIG" not in name.upper().split():
        name = f"{parent_name or 'unknown GPU'} MIG"  # a slice is never named as the whole GPU
    return CellGpu(guarded(lambda: int(pynvml.nvmlDeviceGetIndex(parent))), text(pynvml.nvmlDeviceGetUUID(parent)),
                   name, True, guarded(lambda: text(pynvml.nvmlDeviceGetUUID(mig_handle))), found_by)


def _old_form_slice(pynvml: Any, entry: str) -> CellGpu:
    """MIG-GPU-<gpu uuid>/<gpu instance>/<compute instance> (CUDA 11.0-11.3)."""
    parts = entry[len("MIG-"):].split("/")
    parent = _handle_by_uuid(pynvml, parts[0])
    found_by = f"CUDA_VISIBLE_DEVICES MIG id {entry}"
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        for mig_handle in guarded(lambda: _mig_handles(pynvml, parent), []):
            if (guarded(lambda: pynvml.nvmlDeviceGetGpuInstanceId(mig_handle)) == int(parts[1])
                    and guarded(lambda: pynvml.nvmlDeviceGetComputeInstanceId(mig_handle)) == int(parts[2])):
                return _slice(pynvml, mig_handle, found_by)
    gpu = _whole_gpu(pynvml, parent, found_by)
    return CellGpu(gpu.index, gpu.uuid, gpu.name if gpu.mig else f"{gpu.name} MIG", True, gpu.mig_uuid, found_by)
