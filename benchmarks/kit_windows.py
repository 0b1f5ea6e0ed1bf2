"""Where each GPU window's minutes went, read from a published kit folder's kit.log and host facts.

    python benchmarks/kit_windows.py benchmarks/results/<date>-<gpu>              # a table, one row per window
    python benchmarks/kit_windows.py FOLDER --units .py- [--windows 3,4]            # those windows' units matching
    python benchmarks/kit_windows.py FOLDER FOLDER ...    # several folders' windows, each named by its folder

A window in kit.log runs from its "window: budget" line to its "window done in N s" line; its preflight is the
"preflight done in N s" it logs (of it, "doctor and imports" from "host recorded" to "doctor: exit": what a later
window at the same commit, GPU model and wheelhouse no longer spends), its checks the time from "GPU checks on a GPU" to its first unit starting (or to
the plan's line when none starts), its units' span the time from the first unit starting to its "ran N units this
window" line, and each unit's seconds the "ok in N s" (or "error in", "unsupported in") the kit logs for it. kit.log
gives times of day only: a window's date is that of the host facts (host.json, host-<time>.json, "recorded_at")
the window recorded, else the day after the previous window's when the clock went back. It reads files and never
measures: docs/gpu-kit.md's generated blocks are its output (benchmarks/docblocks.py checks them).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from pathlib import Path

LINE = re.compile(r"^\[kit (\d\d:\d\d:\d\d)\] (.*)$")
UNIT_DONE = re.compile(r"^(\S+): (ok|error|unsupported|timeout|failed|busy)\w* in (\d+) s")


@dataclass
class Unit:
    name: str
    status: str
    seconds: int


@dataclass
class Window:
    number: int
    day: date
    start: str
    budget_s: int | None = None
    preflight_s: int | None = None
    host_at: str | None = None
    machine: tuple[str, str] | None = None  # (GPU model, commit) as "host recorded" says them
    doctor_s: int | None = None
    checks_from: str | None = None
    checks_s: int | None = None
    units_from: str | None = None
    units_span_s: int | None = None
    wall_s: int | None = None
    units: list[Unit] = field(default_factory=list)
    label: str | None = None  # shown instead of its number (several folders: the folder's)


def seconds_between(earlier: str, later: str) -> int:
    first, second = (datetime.strptime(t, "%H:%M:%S") for t in (earlier, later))
    return int((second - first).total_seconds()) % 86400


def host_dates(folder: Path) -> dict[str, date]:
    """Time of day (HH:MM:SS) -> date of every host fact the folder holds."""
    found = {}
    for path in sorted(folder.glob("host*.json")):
        recorded = json.loads(path.read_text()).get("recorded_at")
        if recorded:
            when = datetime.fromisoformat(recorded)
            found[f"{when:%H:%M:%S}"] = when.date()
    return found


def folder_date(folder: Path) -> date:
    """The day its log begins: a published folder's name says it (<date>-<gpu>), else its first host facts."""
    try:
        return date.fromisoformat(folder.name[:10])
    except ValueError:
        dates = sorted(host_dates(folder).values())
        if not dates:
            raise SystemExit(f"error: {folder}: neither a dated folder name nor host facts (host*.json) say when "
                             "its log begins") from None
        return dates[0]


def windows(folder: Path) -> list[Window]:
    hosts, found = host_dates(folder), []
    day, last = folder_date(folder), None
    for line in (folder / "kit.log").read_text().splitlines():
        match = LINE.match(line)
        if not match:
            continue
        clock, text = match.groups()
        if text.startswith("window: budget"):
            if last is not None and clock < last:
                day += timedelta(days=1)
            found.append(Window(len(found) + 1, day, clock, budget_s=int(re.search(r"budget (\d+) s", text)[1])))
        last = clock
        if not found:
            continue
        window = found[-1]
        if text.startswith("host recorded:"):
            window.host_at = clock
            if recorded := re.match(r"host recorded: (.+), commit (\w+)", text):
                window.machine = (recorded[1], recorded[2])
            if clock in hosts:
                window.day = day = hosts[clock]
        elif text.startswith("doctor: exit") and window.host_at:
            window.doctor_s = seconds_between(window.host_at, clock)
        elif done := re.match(r"preflight done in (\d+) s", text):
            window.preflight_s = int(done[1])
        elif text.startswith("GPU checks on a GPU"):
            window.checks_from = clock
        elif text.endswith("running") or ": running (" in text:
            if window.units_from is None:
                window.units_from = clock
                if window.checks_from:
                    window.checks_s = seconds_between(window.checks_from, clock)
        elif done := UNIT_DONE.match(text):
            window.units.append(Unit(done[1], done[2], int(done[3])))
        elif re.match(r"ran \d+ units this window", text):
            if window.units_from:
                window.units_span_s = seconds_between(window.units_from, clock)
        elif re.search(r"units settled|^\d+ units: ", text) and window.checks_from and window.checks_s is None:
            window.checks_s = seconds_between(window.checks_from, clock)
        elif done := re.match(r"window done in (\d+) s", text):
            window.wall_s = int(done[1])
    return found


def span(values: list[int]) -> str:
    if not values:
        return ""
    low, high = min(values), max(values)
    return f"{low}" if low == high else f"{low}-{high}"


def cell(value) -> str:
    return "" if value is None else str(value)


def window_table(found: list[Window], *, same_machine_note: bool = True) -> str:
    """One row per window; same_machine_note: say which windows found an earlier one's machine and commit (one
    folder's windows: its later windows could skip doctor and the imports)."""
    lines = ["| window | started (UTC) | budget s | preflight s | of it doctor and imports s | checks s | units: ok, "
             "other | units' span s | each unit s | window s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for window in found:
        ok = sum(unit.status == "ok" for unit in window.units)
        lines.append(f"| {window.label or window.number} | {window.day} {window.start[:5]} | {cell(window.budget_s)} | "
                     f"{cell(window.preflight_s)} | {cell(window.doctor_s)} | {cell(window.checks_s)} | {ok}, {len(window.units) - ok} | "
                     f"{cell(window.units_span_s)} | {span([unit.seconds for unit in window.units])} | "
                     f"{cell(window.wall_s)} |")
    repeated = [window for i, window in enumerate(found)
                if window.machine and any(earlier.machine == window.machine for earlier in found[:i])]
    if same_machine_note and repeated and not any(window.doctor_s is None for window in repeated):
        lines += ["", f"Windows on the GPU model and at the commit of an earlier window: "
                      f"{', '.join(str(window.number) for window in repeated)}, whose doctor and imports took "
                      f"{', '.join(str(window.doctor_s) for window in repeated)} s: what the preflight record in "
                      "kit-state.json now saves such a window."]
    return "\n".join(lines)


def unit_table(found: list[Window], pattern: str) -> str:
    lines = [f"| window | started (UTC) | units matching `{pattern}` | their seconds | each unit s | the longest |",
             "|---|---|---|---|---|---|"]
    for window in found:
        units = [unit for unit in window.units if pattern in unit.name]
        if not units:
            continue
        longest = max(units, key=lambda unit: unit.seconds)
        lines.append(f"| {window.label or window.number} | {window.day} {window.start[:5]} | {len(units)} | "
                     f"{sum(unit.seconds for unit in units)} | {span([unit.seconds for unit in units])} | "
                     f"`{longest.name}` ({longest.seconds} s) |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+", metavar="folder",
                        help="a published kit folder (kit.log, host*.json); several: one table of their windows")
    parser.add_argument("--units", metavar="TEXT", help="per window, the units whose name holds TEXT")
    parser.add_argument("--windows", metavar="N,N", help="only these windows (1 is the log's first)")
    args = parser.parse_args()
    if len(args.folders) == 1:
        found = windows(args.folders[0])
    else:
        found = [replace(window, label=f"{folder.parent.name}/{folder.name}"
                         + (f" #{window.number}" if window.number > 1 else ""))
                 for folder in args.folders for window in windows(folder)]
    if args.windows:
        wanted = {int(number) for number in args.windows.split(",")}
        found = [window for window in found if window.number in wanted]
    print(unit_table(found, args.units) if args.units
          else window_table(found, same_machine_note=len(args.folders) == 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
