"""Records -> Parquet: one file per cell-repeat, written atomically (temp file + rename)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import uuid
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


def extra_of(value: Any) -> Any:
    """A row's `extra` as an object: a row read back from its file holds it as JSON text, a record being written as a
    dict (ValueError for text that is not JSON)."""
    return json.loads(value) if isinstance(value, str) else (value or {})


def normalise(record: dict[str, Any]) -> dict[str, Any]:
    """Fit a cell's record to the schema: known columns typed, anything else kept under `extra`."""
    record = dict(record)
    extra = extra_of(record.pop("extra", None))
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
    """An ok row with exactly this spec's identity and repeat, if one is on disk (--resume), under any file name:
    an older writer gave other names (schema v6: `tf32-off` where today's says `prec-fp32`). Any schema version: an
    older row's identity reads its missing settings as what it was measured at (identity.OLD_ROWS_READ_AS), so a
    schema bump never makes a measured cell run again. Of several, the one the report keeps (preferred_row_key)."""
    found = [(path, row) for path in _candidate_paths(spec, out_dir)
             if (row := read_row(path)) and _is_ok_row_of(row, spec.identity, spec.repeat)]
    # Ties go to the later name, as in the report (fwbench_aggregator.loading.deduplicate).
    return max(found, key=lambda found_row: (preferred_row_key(found_row[1]), str(found_row[0])), default=None)


def _candidate_paths(spec, out_dir: Path) -> list[Path]:
    """The files that may hold a row of this cell-repeat: the two names today's writer gives, then every other
    `<task>.*.r<repeat>.parquet` of the cell's folder (only the names of its task and repeat are read: cheap)."""
    direct = [readable_path(spec, out_dir), hashed_path(spec, out_dir)]
    folder = direct[0].parent
    if not folder.is_dir():
        return direct
    suffix = f".r{spec.repeat}.parquet"
    others = sorted(path for path in folder.iterdir()
                    if path.name.startswith(f"{spec.task}.") and path.name.endswith(suffix) and path not in direct)
    return direct + others


def preferred_row_key(row: dict[str, Any]) -> tuple:
    """The one rule for which of several rows of one identity and repeat stands (the report's de-duplication and
    --resume): the highest key. An ok row over any other; then a quiet row (busy false or unknown) over a busy one,
    since a busy row's times include someone else's work; then the newest started_at (a missing one is oldest)."""
    busy = row.get("busy")
    is_busy = busy is not None and busy == busy and bool(busy)  # NaN (missing, read through pandas) is not busy
    started = _timestamp(row.get("started_at"))
    return (row.get("status") == "ok", not is_busy, started is not None, started or 0.0)


def started_utc(value: Any) -> dt.datetime | None:
    """A row's started_at as an aware UTC datetime (a naive time read as UTC; text, Python's or pandas' datetime),
    so rows of any writer compare; None where it is missing or unreadable."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, dt.datetime) or value != value:  # NaT (a missing time read through pandas)
        return None
    return (value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)).astimezone(dt.timezone.utc)


def _timestamp(value: Any) -> float | None:
    """started_at as seconds since the epoch."""
    started = started_utc(value)
    return None if started is None else started.timestamp()


def _is_ok_row_of(row: dict[str, Any], identity: CellIdentity, repeat: int) -> bool:
    return row.get("status") == "ok" and row_identity(row) == identity and row.get("repeat") == repeat


def target_path(spec, out_dir: Path, record: dict[str, Any], *, replace_ok: bool = False) -> Path:
    """Where a new row (`record`) goes: the readable name, unless that file holds a row that must stay, then the
    hashed name. A row must stay when it is of another identity (another measurement), or an ok row of this
    identity and repeat: a re-run, failed or not, never loses a measurement, unless the user asked to replace it
    (replace_ok: `--no-resume`); the report shows the row preferred_row_key prefers (the ok row over a failure, of two
    ok rows the quiet one, then the newest). If both names hold rows that must stay, the new row gets a name of its
    own (its record id), never the name of a row that must stay."""
    identity = CellIdentity.of_row(record)
    keep_ok_rows = not replace_ok

    def must_stay(path: Path) -> bool:
        existing = read_row(path)
        if existing is None:
            return False
        if row_identity(existing) != identity:
            return True
        return keep_ok_rows and _is_ok_row_of(existing, identity, spec.repeat)

    readable = readable_path(spec, out_dir)
    if not must_stay(readable):
        return readable
    hashed = hashed_path(spec, out_dir, identity)
    if not must_stay(hashed):
        return hashed
    suffix = f".r{spec.repeat}.parquet"

    def named(own: str) -> Path:
        return hashed.with_name(hashed.name.replace(suffix, f".{own}{suffix}"))

    own = re.sub(r"[^A-Za-z0-9]", "", str(record.get("record_id") or ""))[:12] or uuid.uuid4().hex[:12]
    if must_stay(named(own)):  # a record id can repeat (a copied or rewritten record): a fresh name then
        return named(uuid.uuid4().hex[:12])
    return named(own)


def write_new_row(spec, out_dir: Path, record: dict[str, Any], *, replace_ok: bool = False) -> Path:
    """Write a cell-repeat's new row where target_path puts it (every writer of cell rows goes through here)."""
    return write_row(record, target_path(spec, out_dir, record, replace_ok=replace_ok))
