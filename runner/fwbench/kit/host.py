"""What the host is (host.json, nvidia-smi.txt): NVML, the CPU, every installed version and how it differs from the
repository's `current` pins, the commit, the wheelhouse; and how many GPUs the runner can place cells on."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from fwbench.core.atomic import write_atomically
from fwbench.core.pins import normalise, pinned_versions
from fwbench.kit.image import KIT_STACKS
from fwbench.kit.layout import REPO, KitFolders
from fwbench.kit.source import source_revision
from fwbench.kit.wheelhouse import locked_wheels


def installed_versions(site: Path) -> dict[str, str]:
    paths = [str(site), *sys.path]
    return {normalise(dist.metadata["Name"]): dist.version
            for dist in metadata.distributions(path=paths) if dist.metadata["Name"]}


def pin_differences(versions: dict[str, str]) -> dict[str, list[str]]:
    """Per stack: how the host's libraries differ from the repository's `current` pins (the rows carry the
    host's real versions in library_versions; this says at a glance where they are not the pinned ones)."""
    differences = {}
    for stack in KIT_STACKS:
        pins = pinned_versions(REPO / "images" / stack / "current" / "requirements.txt")
        differences[stack] = [f"{name} {versions.get(name, 'absent')} (pinned {pinned})"
                              for name, pinned in sorted(pins.items()) if versions.get(name) != pinned]
    return differences


def usable_gpu_count() -> int:
    """The GPUs fwbench's runner would give cells here (NVML, else nvidia-smi; narrowed to CUDA_VISIBLE_DEVICES):
    the kit's data-parallel cells ask for all of them, exactly what the runner can place."""
    from fwbench.engines.slots import usable_gpus

    return len(usable_gpus())


def gpu_names() -> list[str]:
    from fwbench.harness.envinfo import nvml_info

    return nvml_info().get("gpu_names") or []


def record_host(folders: KitFolders) -> dict:
    """host.json and nvidia-smi.txt in the window's folder; returns the facts."""
    from fwbench.harness.envinfo import cpu_model, nvml_info

    versions = installed_versions(folders.site)
    facts = {
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hostname": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
        "python_executable": sys.executable, "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
        "nvml": nvml_info(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "usable_gpus": usable_gpu_count(),
        **source_revision(folders.source), "wheelhouse": locked_wheels(),
        "versions": dict(sorted(versions.items())), "differences_from_current_pins": pin_differences(versions),
    }
    write_atomically(folders.out / "host.json", json.dumps(facts, indent=2) + "\n")
    smi = shutil.which("nvidia-smi")
    try:
        text = subprocess.run([smi, "-q"], capture_output=True, text=True, timeout=60).stdout if smi else \
            "nvidia-smi: not found\n"
    except subprocess.TimeoutExpired:
        text = "nvidia-smi -q: no answer within 60 s\n"
    write_atomically(folders.out / "nvidia-smi.txt", text)
    return facts


def window_gpu(folders: KitFolders) -> str | None:
    """The window's GPU model, from its host.json (None: no GPU, or no host facts yet)."""
    host = folders.out / "host.json"
    try:
        names = (json.loads(host.read_text()).get("nvml") or {}).get("gpu_names") if host.is_file() else None
    except (OSError, ValueError):
        return None
    return names[0] if names else None
