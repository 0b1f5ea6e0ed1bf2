"""The published results folders of the kit (benchmarks/results/<date>-<gpu>/): how one is named, which one a window
of a GPU model goes on from, and how the host facts of every window stay beside each other."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fwbench.kit.state import KitState


def gpu_slug(names: list[str]) -> str | None:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3' (the first GPU's)."""
    return re.sub(r"[^a-z0-9]+", "-", names[0].lower()).strip("-") if names else None


def find_results(results: Path, slug: str | None) -> Path | None:
    """The newest published results folder of this GPU model that holds a kit state, if any."""
    if not results.is_dir() or not slug:
        return None
    found = sorted(path for path in results.glob(f"*-{slug}") if (path / "kit-state.json").is_file())
    return found[-1] if found else None


def continued_folder(results: Path, slug: str, state_path: Path) -> Path | None:
    """The newest published folder of this GPU whose units this kit state holds, each ok one still ok (the state
    went on from it), or None."""
    if not state_path.is_file() or not results.is_dir():
        return None
    units = KitState(state_path).units
    for folder in sorted(results.glob(f"*-{slug}"), reverse=True):
        if not (folder / "kit-state.json").is_file():
            continue
        earlier = KitState(folder / "kit-state.json").units
        if earlier and all(key in units and (units[key].get("status") == entry.get("status") or entry.get("status")
                                             != "ok") for key, entry in earlier.items()):
            return folder
    return None


def keep_earlier_host(host_path: Path, host: dict) -> None:
    """An earlier window's host.json (restored into a window's folder, or published) stays beside the new host facts
    `host`, as host-<its time>.json; one recorded at host's time is that window's own."""
    if not host_path.is_file():
        return
    recorded = json.loads(host_path.read_text()).get("recorded_at", "earlier")
    if recorded != host.get("recorded_at"):
        kept = host_path.with_name(f"host-{recorded[:19].replace(':', '')}.json")
        if not kept.exists():
            host_path.replace(kept)
