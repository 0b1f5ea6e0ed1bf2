"""Records -> Parquet: one file per cell-repeat, written atomically (temp file + rename)."""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from fwbench.schema import COLUMNS, SCHEMA_VERSION

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
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([normalise(record)], schema=SCHEMA)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_row(path: Path) -> dict[str, Any] | None:
    """The row of one result file, or None if the file is missing or unreadable."""
    try:
        rows = pq.read_table(path).to_pylist()
    except (OSError, pa.ArrowException):
        return None
    return rows[0] if len(rows) == 1 else None


def has_ok_row(path: Path) -> bool:
    row = read_row(path)
    return bool(row and row.get("status") == "ok" and row.get("schema_version") == SCHEMA_VERSION)
