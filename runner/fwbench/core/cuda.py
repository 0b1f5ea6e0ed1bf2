"""What an NVIDIA driver must be for a framework's CUDA build: the one rule the cell (a device_unavailable row's
reason) and `fwbench doctor` both state. Plain Python.

CUDA 11.1+ and 12.x wheels run on any driver of their major family (minor-version compatibility); CUDA 13
needs the R580 driver family.
"""

from __future__ import annotations

import re

MINIMUM_DRIVER_BY_CUDA_MAJOR = {11: "450.80.02", 12: "525.60.13", 13: "580"}


def cuda_major(cuda_version: str | None) -> int | None:
    """12 for "12.1" or "cu121" or "12"; None when there is no CUDA build."""
    text = (cuda_version or "").strip().lower().removeprefix("cu")
    digits = text.split(".")[0]
    if "." not in text and len(digits) >= 3:  # "121": major 12, minor 1
        digits = digits[:-1]
    return int(digits) if digits.isdigit() else None


def minimum_driver(cuda_version: str | None) -> str | None:
    """The oldest NVIDIA driver a CUDA build runs on; None when unknown (no CUDA build, an unknown major)."""
    major = cuda_major(cuda_version)
    return MINIMUM_DRIVER_BY_CUDA_MAJOR.get(major) if major is not None else None


def version_tuple(version: str) -> tuple[int, ...]:
    """'580.65.06' -> (580, 65, 6); ignores anything that is not a number."""
    return tuple(int(part) for part in re.findall(r"\d+", version))


def driver_at_least(driver: str, minimum: str) -> bool:
    """Compare driver versions numerically ("575.57.08" < "580")."""
    return version_tuple(driver) >= version_tuple(minimum)
