"""Records -> Parquet: one file per cell-repeat, written atomically (temp file + rename)."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from fwbench.core.atomic import write_atomically_with
from fwbench.core.identity import CellIdentity, file_tokens
from fwbench.core.schema import COLUMNS, SCHEMA_VERSION

_TYPES = {
    "string": pa.string(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "list<float64>": pa.list_(pa.float64()),
}

SCHEMA = pa.schema(
    [pa.field(name, _TYPES[kind], nullable=name != "schema_version", metadata={"description": doc})
     for name, kind, doc in COLUMNS],
    metadata={"fwbench_schema_version": str(SCHEMA_VERSION)},
)
_JSON_COLUMNS = ("library_versions", "extra")


def normalise(record: dict[str, Any]) -> dict[str, Any]:
    """Fit a cell's record to the schema: known columns typed, anything else kept under `extra`."""
    record = dict(record)
    extra = record.pop("extra", None) or {}
    if isinstance(extra, str):
        extra = json.loads(extra)
    for key in list(record):
        if key not in SCHEMA.names:
            extra[key] = record.pop(key)
    record["extra"] = extra
    # Derived here, in the one place every row passes, from the columns the identity is made of.
    record["settings_id"] = CellIdentity.of_row(record).settings_id
    row: dict[str, Any] = {}
    for name, kind, _ in COLUMNS:
        value = record.get(name)
        if name in _JSON_COLUMNS and value is not None and not isinstance(value, str):
            value = json.dumps(value, sort_keys=True, default=str)
        elif kind == "timestamp" and isinstance(value, str):
            value = dt.datetime.fromisoformat(value)
        elif kind == "int64" and value is not None:
            value = int(value)
        elif kind == "float64" and value is not None:
            value = float(value)
        row[name] = value
    row["schema_version"] = SCHEMA_VERSION
    return row


def write_row(record: dict[str, Any], path: Path) -> Path:
    """Write one row to `path` atomically: readers see the old file or the new one, never half of one."""
    path = Path(path)
    table = pa.Table.from_pylist([normalise(record)], schema=SCHEMA)
    write_atomically_with(path, lambda temp: pq.write_table(table, temp), fsync=True)
    return path


def read_row(path: Path) -> dict[str, Any] | None:
    """The row of one result file, or None if the file is missing or unreadable."""
    try:
        rows = pq.read_table(path).to_pylist()
    except (OSError, pa.ArrowException):
        return None
    return rows[0] if len(rows) == 1 else None


# -- where a cell-repeat's file lives --------------------------------------------------------------
# <out>/<preset>/<stack>/<task>.compile-<mode>[.<tokens>][.id-<settings hash>].r<repeat>.parquet
# Tokens name the non-default settings readably. The hash is added only when the readable name is
# already taken by a row of another identity (another device, image variant or host default), so a
# second run into the same folder never replaces a different measurement.

def host_defaults(preset: str, task: str) -> dict[str, Any]:
    """Defaults that depend on the preset, the task and the host: they give no file-name token."""
    from fwbench.core import registry

    return {"threads": os.cpu_count() or 1, "warmup": registry.get_preset(preset).warmup,
            "steps": registry.default_steps(task, preset)}


def readable_path(spec, out_dir: Path) -> Path:
    """The readable file name of a cell-repeat: the plain name for default settings, plus one token per
    non-default setting (e.g. `bert-fit.compile-none.tf32-on.r0.parquet`); target_path says when a settings
    hash is added to it."""
    tokens = file_tokens(spec.identity, host_defaults(spec.preset, spec.task))
    stem = ".".join([spec.task, f"compile-{spec.compile_mode}", *tokens])
    return Path(out_dir) / spec.preset / spec.stack / f"{stem}.r{spec.repeat}.parquet"


def hashed_path(spec, out_dir: Path, identity: CellIdentity | None = None) -> Path:
    readable = readable_path(spec, out_dir)
    stem = readable.name.removesuffix(f".r{spec.repeat}.parquet")
    settings_id = (identity or spec.identity).settings_id
    return readable.with_name(f"{stem}.id-{settings_id}.r{spec.repeat}.parquet")


def row_identity(row: dict[str, Any] | None) -> CellIdentity | None:
    return None if row is None else CellIdentity.of_row(row)


def matching_ok_row(spec, out_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """An ok row of the current schema with exactly this spec's identity, if one is on disk (--resume)."""
    for path in (readable_path(spec, out_dir), hashed_path(spec, out_dir)):
        row = read_row(path)
        if (row and row.get("status") == "ok" and row.get("schema_version") == SCHEMA_VERSION
                and row_identity(row) == spec.identity and row.get("repeat") == spec.repeat):
            return path, row
    return None


def target_path(spec, out_dir: Path, identity: CellIdentity) -> Path:
    """Where a new row of `identity` goes: the readable name, unless that file holds (readable) a row
    of another identity, which must not be replaced."""
    readable = readable_path(spec, out_dir)
    existing = read_row(readable)
    if existing is None or row_identity(existing) == identity:
        return readable
    return hashed_path(spec, out_dir, identity)
