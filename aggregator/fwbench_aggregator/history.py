"""The results history: result rows of many runs in one store, read back with DuckDB (`fwbench history`).

The store is a folder of Parquet files, one per `add`, partitioned by the day of the add:

    STORE/rows/added=YYYY-MM-DD/<HHMMSS>-<random>.parquet

Each file holds whole result rows (every column of the schema the rows were read at, upgraded as
fwbench_aggregator.loading upgrades them, plus `source_file`) and two of the store's own: HISTORY_KEY and ADDED_AT.
A row already stored is recognised by its measurement: its cell (cell_id and the settings_id it was written with),
repeat and started_at (HISTORY_KEY), or its record_id; an `add` writes only rows recognised by neither. The new file
is written to a temporary name and renamed into place (fwbench.core.atomic), under a lock on STORE/.lock, so a killed
`add` leaves the whole file or none: never half a file, a lost row or a row twice. A temporary file it leaves behind
is never read (its name does not end in .parquet) and the next add removes it. Reads ask DuckDB, which keeps one row
per HISTORY_KEY and per record_id even if files were copied in twice by hand.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fwbench.core.atomic import write_atomically_with
from fwbench.core.results import started_utc

from fwbench_aggregator import loading
from fwbench_aggregator.errors import AggregateUsageError, NoResultsError

STORE_ENV = "FWBENCH_HISTORY"
ROWS = "rows"
HISTORY_KEY = "history_key"
ADDED_AT = "history_added_at"
STORE_VERSION = "1"
_LOCK = ".lock"


class HistoryError(AggregateUsageError):
    """A store that cannot be used (exit 2)."""


def default_store() -> Path:
    """$FWBENCH_HISTORY, else the user's data folder: $XDG_DATA_HOME/fwbench/history (~/.local/share/...)."""
    if os.environ.get(STORE_ENV):
        return Path(os.environ[STORE_ENV])
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "fwbench" / "history"


def history_key(row) -> str:
    """The measurement a row is: its cell (cell_id, the settings_id it was written with), repeat and start time
    (UTC, to the microsecond); a row without a start time is known by its record_id alone."""
    started = started_utc(row.get("started_at"))
    if started is None:
        return "record:" + str(row["record_id"])
    text = "|".join([str(row["cell_id"]), str(row.get("settings_id")), str(row["repeat"]), started.isoformat()])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def store_files(store: Path) -> list[Path]:
    """The store's row files (temporary files of an add in progress or killed are not among them)."""
    folder = Path(store) / ROWS
    return sorted(path for path in folder.glob("added=*/*.parquet") if not path.name.startswith("."))


@dataclass
class Added:
    """What one add did: rows written, rows the store already had, the file written (None: nothing new)."""

    new: int
    already: int
    file: Path | None
    skipped: list[loading.SkippedFile] = field(default_factory=list)


def add(store: Path, result_dirs: list[Path], *, now: dt.datetime | None = None) -> Added:
    """Append the rows of every result file under result_dirs that the store does not hold yet, as one new file."""
    store = Path(store)
    check_store(store)
    tables, skipped = read_rows(result_dirs, exclude=store)
    now = now or dt.datetime.now(dt.timezone.utc)
    incoming = pa.concat_tables(tables).cast(loading.MERGED_SCHEMA)
    rows = incoming.to_pylist()
    keys = [history_key(row) for row in rows]
    with locked(store):
        remove_leftovers(store)
        known_keys, known_records = stored_ids(store)
        chosen = []
        for index, (row, key) in enumerate(zip(rows, keys)):
            if key in known_keys or row["record_id"] in known_records:
                continue
            known_keys.add(key)
            known_records.add(row["record_id"])
            chosen.append(index)
        if not chosen:
            return Added(0, len(rows), None, skipped)
        table = incoming.take(chosen)
        table = table.append_column(pa.field(HISTORY_KEY, pa.string()),
                                    pa.array([keys[i] for i in chosen], pa.string()))
        table = table.append_column(pa.field(ADDED_AT, pa.timestamp("us", tz="UTC")),
                                    pa.array([now] * len(chosen), pa.timestamp("us", tz="UTC")))
        # Sorted so that DuckDB's row-group statistics skip other stacks and tasks when a query names some.
        table = table.sort_by([("stack", "ascending"), ("task", "ascending"), ("started_at", "ascending")])
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               b"fwbench_history_store_version": STORE_VERSION.encode()})
        path = (store / ROWS / f"added={now:%Y-%m-%d}" / f"{now:%H%M%S}-{uuid.uuid4().hex[:12]}.parquet")
        write_atomically_with(path, lambda temp: pq.write_table(table, temp), fsync=True)
        _sync_folder(path.parent)
    return Added(len(chosen), len(rows) - len(chosen), path, skipped)


def check_store(store: Path) -> None:
    if store.exists() and not store.is_dir():
        raise HistoryError(f"the history store {store} is a file, not a folder")


def read_rows(result_dirs: list[Path], *, exclude: Path | None = None) -> tuple[list[pa.Table], list]:
    """Every usable result file's rows (each checked and upgraded by fwbench_aggregator.loading), and the files
    skipped with why. Every row is kept: two runs of one cell-repeat are two measurements here (the report's
    de-duplication keeps one of them; the history keeps both)."""
    found = [path for path in loading.find_result_files(result_dirs, exclude) if not loading.is_stability_file(path)]
    where = ", ".join(str(d) for d in result_dirs)
    if not found:
        raise NoResultsError(f"no result files (*.parquet) found under {where}")
    tables, skipped = [], []
    for path in found:
        outcome = loading.read_result_file(path)
        (skipped if isinstance(outcome, loading.SkippedFile) else tables).append(outcome)
    if not tables:
        raise NoResultsError(f"none of the {len(found)} result files under {where} is usable (first problem: "
                             f"{skipped[0].line()})", skipped=skipped)
    return tables, skipped


@contextlib.contextmanager
def locked(store: Path):
    """One add at a time per store (an advisory lock the system releases if the holder is killed)."""
    try:
        store.mkdir(parents=True, exist_ok=True)
        handle = open(store / _LOCK, "a")
    except OSError as exc:
        raise HistoryError(f"cannot use the history store {store}: {exc.strerror or exc}") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remove_leftovers(store: Path) -> None:
    """Temporary files of killed adds (under the lock no add is writing one)."""
    for path in (Path(store) / ROWS).glob("added=*/.*.tmp"):
        path.unlink(missing_ok=True)


def stored_ids(store: Path) -> tuple[set[str], set[str]]:
    """The history keys and record ids the store holds."""
    files = store_files(store)
    if not files:
        return set(), set()
    found = connect().execute(f"SELECT {HISTORY_KEY}, record_id FROM read_parquet($files, union_by_name = true, "
                              "hive_partitioning = false)", {"files": [str(p) for p in files]}).fetchall()
    return {key for key, _ in found}, {record for _, record in found}


def query(store: Path, *, stacks: list[str] | None = None, tasks: list[str] | None = None):
    """The store's rows (pandas), of these stacks and tasks if given, one per measurement, oldest first."""
    store = Path(store)
    check_store(store)
    files = store_files(store)
    if not files:
        raise HistoryError(f"the history store {store} holds no rows yet (fwbench history add RESULTS_DIR)")
    where, parameters = [], {"files": [str(p) for p in files]}
    for column, values in (("stack", stacks), ("task", tasks)):
        if values:
            where.append(f"{column} IN (SELECT unnest(${column}s))")
            parameters[f"{column}s"] = list(values)
    sql = (f"SELECT * FROM read_parquet($files, union_by_name = true, hive_partitioning = false)"
           f"{' WHERE ' + ' AND '.join(where) if where else ''} "
           f"QUALIFY row_number() OVER (PARTITION BY {HISTORY_KEY} ORDER BY {ADDED_AT}, record_id) = 1")
    # Then one per record id too (a row rewritten with another start time is still one measurement).
    sql = (f"SELECT * FROM ({sql}) QUALIFY row_number() OVER (PARTITION BY record_id ORDER BY {ADDED_AT}) = 1 "
           "ORDER BY started_at, record_id")
    return connect().execute(sql, parameters).df()


def connect():
    import duckdb  # lazy: only the history commands need it

    return duckdb.connect()


def _sync_folder(folder: Path) -> None:
    """Flush the folder's entry of the renamed file, so a crash after the add keeps it."""
    with contextlib.suppress(OSError):
        handle = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)
