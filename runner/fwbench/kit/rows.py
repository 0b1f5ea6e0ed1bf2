"""A unit's rows, found by the cell identity: a row is the unit's when CellIdentity.of_row(row) equals the unit's
spec.identity in every field but those the engine and the host fill in (HOST_FILLED), and its repeat is the unit's.
File names are never read: a row's name may carry setting tokens, a settings hash or a record id."""

from __future__ import annotations

from pathlib import Path

from fwbench.core import axes, results
from fwbench.core.identity import CellIdentity, held_equal
from fwbench.kit.unit import Unit

# Settings the kit does not choose: the runner's threads, the preset's warm-up, the GPU and the image it ran on.
HOST_FILLED = ("threads", "warmup", "device_model", "image_variant")
# Settings a row written before its column existed does not record (no axis reads them back): such a row matches.
_UNRECORDED = {axis.name for axis in axes.AXES if axis.read_old is None}

_READ: dict[Path, tuple[tuple[int, int], dict | None]] = {}  # path -> ((mtime, size), row): each file read once


def read(path: Path) -> dict | None:
    """The row of a file (None: unreadable), read again only when the file changed."""
    stat = path.stat()
    seen = (stat.st_mtime_ns, stat.st_size)
    cached = _READ.get(path)
    if cached is None or cached[0] != seen:
        cached = _READ[path] = (seen, results.read_row(path))
    return None if cached[1] is None else dict(cached[1])  # a copy: a caller may add to its row


def is_unit_row(unit: Unit, row: dict) -> bool:
    if row.get("repeat") != unit.repeat:
        return False
    mine, theirs = held_equal(unit.spec.identity, HOST_FILLED), held_equal(CellIdentity.of_row(row), HOST_FILLED)
    if (mine.stack, mine.task, mine.preset, mine.compile_mode) != (theirs.stack, theirs.task, theirs.preset,
                                                                    theirs.compile_mode):
        return False
    return all(value == other or (other is None and name in _UNRECORDED)
               for (name, value), (_, other) in zip(mine.settings, theirs.settings))


def unit_rows(folder: Path, unit: Unit) -> list[tuple[Path, dict]]:
    """The unit's rows in a results folder, oldest file first (its stack's folder, where fwbench's writer puts a
    cell's rows: fwbench.core.results.readable_path)."""
    stack_folder = results.readable_path(unit.spec, folder).parent
    if not stack_folder.is_dir():
        return []
    found = [(path, row) for path in stack_folder.glob("*.parquet") if (row := read(path)) and is_unit_row(unit, row)]
    return sorted(found, key=lambda item: (item[0].stat().st_mtime_ns, item[0].name))


def unit_row(folder: Path, unit: Unit) -> dict | None:
    """The newest row of the unit, or None."""
    found = unit_rows(folder, unit)
    return found[-1][1] if found else None


def all_rows(folder: Path) -> list[dict]:
    """Every row under a folder (the window's rows/ or a published folder's)."""
    return [row for path in sorted(folder.rglob("*.parquet")) if (row := read(path))]
