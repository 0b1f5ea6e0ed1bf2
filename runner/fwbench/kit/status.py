"""`fwbench kit status`: the plan's units done and left (in estimated device minutes), the GPU checks' verdicts,
where each unit's seconds went, and each window's timed fraction (its units' timed steps over its wall time)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from fwbench.kit import breakdown
from fwbench.kit.host import usable_gpu_count
from fwbench.kit.layout import KitFolders
from fwbench.kit.plan import PlanSettings, plan_units, scaling_note
from fwbench.kit.rows import unit_row
from fwbench.kit.source import source_revision
from fwbench.kit.state import BUDGET_CUT, KitState
from fwbench.kit.unit import Unit

# What a 15-minute window leaves for cells: a 540-s budget less preflight, the checks' share and the reserve.
WINDOW_UNITS_S = 300.0


def plan_lines(state: KitState, units: list[Unit], left_out: list[str]) -> list[str]:
    counts: dict[str, int] = {}
    for unit in units:
        key = state.status(unit) or ("pending" if state.runnable(unit, False) else "waiting")
        counts[key] = counts.get(key, 0) + 1
    left = [unit for unit in units if state.status(unit) in (None, BUDGET_CUT)]
    minutes = sum(state.needed_s(unit) for unit in left) / 60
    return [", ".join(f"{count} {name}" for name, count in sorted(counts.items())) + f" (of {len(units)} units; "
            f"{len(left_out)} cells left out as this host cannot run them)",
            f"left: {len(left)} units, about {minutes:.0f} device minutes (estimated; about "
            f"{math.ceil(minutes * 60 / WINDOW_UNITS_S)} windows of {WINDOW_UNITS_S:.0f} s of cells)"]


def unit_lines(state: KitState, units: dict[str, Unit], rows: Path) -> list[str]:
    """Per unit that ran, in the order it ran: its status, wall time and where the seconds went. A unit a kit
    before this one ran has no parts recorded: those its row gives are read from it (units: the plan's, by key)."""
    ran = sorted(state.units.items(), key=lambda item: item[1].get("order") or 0)
    if not ran:
        return []
    lines = ["units (seconds: the unit's wall time, then its parts; timed = ms/step x timed steps):"]
    for key, entry in ran:
        window = f", window {entry['window']}" if entry.get("window") else ""
        parts, source = entry.get("breakdown"), ""
        row = unit_row(rows, units[key]) if key in units else None
        if not parts and key in units and entry.get("wall_s"):
            parts, source = breakdown.of_unit(row, began_at=None, wall_s=entry["wall_s"]), " (from its row)"
        parts = breakdown.with_checksum(parts, row)
        ahead = f" ({entry['ahead_s']:.1f} s of it ahead)" if entry.get("ahead_s") else ""
        lines.append(f"  {key}: {entry.get('status')}, {entry.get('wall_s', 0):.1f} s{ahead}{window}{source}: "
                     + breakdown.describe(parts))
    return lines


def window_lines(state: KitState) -> list[str]:
    """Per window: its wall time, units and timed fraction; then all windows together."""
    if not state.windows:
        return []
    lines = ["windows (timed fraction: the timed steps' seconds over the window's wall time; overhead: a unit's "
             "seconds on the window's clock besides its first step and timed steps, the median of the window's units):"]
    total_wall = total_timed = 0.0
    for number, window in enumerate(state.windows, 1):
        entries = [entry for entry in state.units.values() if entry.get("window") == number]
        timed = sum((entry.get("breakdown") or {}).get("timed_s") or 0.0 for entry in entries)
        wall = window.get("wall_s") or 0.0
        total_wall, total_timed = total_wall + wall, total_timed + timed
        overheads = [found for found in map(breakdown.overhead_s, entries) if found is not None]
        overhead = f", overhead {statistics.median(overheads):.1f} s" if overheads else ""
        lines.append(f"  window {number} ({window.get('began_at')}, {window.get('gpu') or 'no GPU'}): {wall:.0f} s, "
                     f"{len(entries)} units, timed steps {timed:.1f} s = {breakdown.timed_fraction(timed, wall)}"
                     + overhead)
    lines.append(f"  all {len(state.windows)} windows: {total_wall:.0f} s, timed steps {total_timed:.1f} s = "
                 f"{breakdown.timed_fraction(total_timed, total_wall)}")
    return lines


def status(folders: KitFolders, plan: PlanSettings) -> list[str]:
    gpus = usable_gpu_count()
    state = KitState(folders.state, source_revision(folders.source).get("git_revision"), plan.preset)
    units, left_out = plan_units(plan, gpus=gpus)
    checks = [f"{entry.get('verdict', '?'):<4} {name} ({entry.get('at')})"
              for name, entry in sorted(state.checks.items())]
    return [*plan_lines(state, units, left_out), *checks, scaling_note(gpus, plan.variants, plan.tasks),
            *unit_lines(state, {unit.key: unit for unit in units}, folders.rows), *window_lines(state)]
