"""How a data-parallel cell's GPUs are connected (the `interconnect` column), in `nvidia-smi topo -m`'s words.

For each pair of the cell's GPUs: `NV<k>` when NVML says peer-to-peer runs over NVLink (k: the first GPU's active
NVLinks, which is what `nvidia-smi topo -m` prints on NVSwitch systems, whose links all go to the switches), else
the PCIe path from NVML's common-ancestor level: PIX, PXB, PHB, NODE or SYS (the legend of `nvidia-smi topo -m`).
The matrix `nvidia-smi topo -m` itself prints is kept beside it where the binary is there (extra.nvidia_smi_topo).

Plain Python: NVML through fwbench.harness.nvml (None, never an exception, where it cannot say).
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
from typing import Any

from fwbench.harness import gpu_identity
from fwbench.harness.nvml import NvmlSession, guarded

# nvmlDeviceGetTopologyCommonAncestor's levels, by nvidia-smi's legend name.
PCIE_LEVELS = {0: "SAME BOARD", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
TOPO_TIMEOUT_S = 10.0


def link(pynvml: Any, first: Any, second: Any) -> str | None:
    """One pair's connection (NV<k>, or the PCIe level); None where NVML cannot say."""
    nvlink = guarded(lambda: pynvml.nvmlDeviceGetP2PStatus(first, second, pynvml.NVML_P2P_CAPS_INDEX_NVLINK))
    if nvlink == pynvml.NVML_P2P_STATUS_OK:
        links = sum(1 for index in range(pynvml.NVML_NVLINK_MAX_LINKS)
                    if guarded(lambda: pynvml.nvmlDeviceGetNvLinkState(first, index)) == pynvml.NVML_FEATURE_ENABLED)
        return f"NV{links}" if links else "NVLink"
    level = guarded(lambda: pynvml.nvmlDeviceGetTopologyCommonAncestor(first, second))
    return PCIE_LEVELS.get(level) if level is not None else None


def describe(gpus: list[gpu_identity.CellGpu], session: NvmlSession | None = None) -> str | None:
    """'0-1 NV18; 0-2 NV18; 1-2 NV18' over the cell's GPUs (named by their position in the cell); None with fewer
    than two GPUs, or where NVML cannot say for some pair (a partial answer would read as the whole)."""
    if len(gpus) < 2:
        return None
    owned = session is None
    session = session or NvmlSession()
    try:
        if not session.open():
            return None
        handles = [session.query(lambda pynvml, gpu=gpu: gpu_identity.nvml_handle(pynvml, gpu)) for gpu in gpus]
        if any(handle is None for handle in handles):
            return None
        pairs = []
        for (a, first), (b, second) in itertools.combinations(enumerate(handles), 2):
            connection = session.query(lambda pynvml, x=first, y=second: link(pynvml, x, y))
            if connection is None:
                return None
            pairs.append(f"{a}-{b} {connection}")
        return "; ".join(pairs)
    finally:
        if owned:
            session.close()


def nvidia_smi_topology() -> str | None:
    """`nvidia-smi topo -m` as printed (None where the binary is missing or fails: a container without it)."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        done = subprocess.run([binary, "topo", "-m"], capture_output=True, text=True, timeout=TOPO_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()[:8000] if done.returncode == 0 and done.stdout.strip() else None
