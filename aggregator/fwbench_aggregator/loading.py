"""Find, validate and merge result Parquet files (read-only: input folders are never written).

Each file is checked on its own and either accepted whole or skipped with ONE line saying why, so a
single bad file never hides the rest of a run. Rows are then de-duplicated across files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fwbench.core import axes, model_file, registry
from fwbench.core import stability as stability_core
from fwbench.core.identity import SAFE_NAME, CellIdentity
from fwbench.core.results import SCHEMA, preferred_row_key
from fwbench.core.schema import ADDED_IN, COLUMN_NAMES, SCHEMA_VERSION, STATUSES

from fwbench_aggregator.errors import AggregateUsageError, NoResultsError
from fwbench_aggregator.precision import PRECISIONS

PARQUET_MAGIC = b"PAR1"
# Columns every row needs to be placed in a table or de-duplicated.
REQUIRED_VALUES = ("record_id", "cell_id", "stack", "task", "preset", "compile_mode", "status")
SOURCE_COLUMN = "source_file"  # added to merged rows: which input file each row came from

MERGED_SCHEMA = SCHEMA.append(pa.field(SOURCE_COLUMN, pa.string(),
                                       metadata={"description": "Input file the row was read from."}))


@dataclass(frozen=True)
class SkippedFile:
    path: Path
    reason: str

    def line(self) -> str:
        return f"skipped {self.path}: {self.reason}"


@dataclass
class LoadedResults:
    table: pa.Table  # merged, de-duplicated rows in MERGED_SCHEMA
    files_read: int
    skipped: list[SkippedFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # de-duplication decisions, said out loud
    # `fwbench stability` records (fwbench.core.stability), newest per key (record_key: the fits' cell identity and
    # fault); never mixed with the cell rows.
    stability: list[dict] = field(default_factory=list)

    def frame(self):
        return self.table.to_pandas()


def find_result_files(result_dirs: list[Path], exclude: Path | None = None) -> list[Path]:
    """Every *.parquet under the given dirs (or the files themselves), skipping hidden and temp files."""
    files: list[Path] = []
    for root in result_dirs:
        root = Path(root)
        if not root.exists():
            raise AggregateUsageError(f"no such file or directory: {root}")
        if root.is_file():
            files.append(root)
            continue
        for path in sorted(root.rglob("*.parquet")):
            relative = path.relative_to(root).parts
            # The writer's temp files are `.name.xxxx.tmp`; hidden dirs are caches, not results.
            if any(part.startswith(".") for part in relative) or path.name.endswith(".tmp"):
                continue
            if exclude is not None and is_within(path, exclude):
                continue  # a report written inside a results dir must not be read back as results
            if path.is_file():
                files.append(path)
    return list(dict.fromkeys(files))


def is_stability_file(path: Path) -> bool:
    """A `fwbench stability` record (its own schema), not a cell row."""
    return path.name.endswith(stability_core.FILE_SUFFIX)


def read_stability_file(path: Path) -> dict | SkippedFile:
    """The one record of a stability file, or why it cannot be used (records are untrusted input, as rows are)."""
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        return SkippedFile(path, f"unreadable stability record ({_first_line(exc)})")
    version = (table.schema.metadata or {}).get(b"fwbench_stability_schema_version")
    try:
        version_number = int(version) if version is not None else None
    except ValueError:
        version_number = None
    if version_number is None:
        return SkippedFile(path, "not a stability record (no fwbench_stability_schema_version)")
    if version_number > stability_core.STABILITY_SCHEMA_VERSION:
        return SkippedFile(path, f"stability schema {version_number} is newer than the supported "
                                 f"{stability_core.STABILITY_SCHEMA_VERSION} (upgrade fwbench to read it)")
    # Columns a later version added: an older record has none, and is read with them empty.
    later = {name for version, names in stability_core.ADDED_IN.items() if version > version_number for name in names}
    missing = [name for name in stability_core.COLUMN_NAMES if name not in table.column_names and name not in later]
    if missing or table.num_rows != 1:
        return SkippedFile(path, f"not a stability record: {'missing ' + ', '.join(missing[:5]) if missing else 'not one row'}")
    for name in sorted(later - set(table.column_names)):
        table = table.append_column(name, pa.nulls(table.num_rows, stability_core.schema().field(name).type))
    try:
        record = table.select(list(stability_core.COLUMN_NAMES)).cast(stability_core.schema()).to_pylist()[0]
    except (pa.ArrowException, ValueError) as exc:
        return SkippedFile(path, f"stability record column types differ ({_first_line(exc)})")
    known = {"stack": registry.STACKS, "task": registry.TASKS, "preset": registry.PRESETS, "precision": PRECISIONS,
             "status": stability_core.STATUSES}
    for column, values in known.items():
        if record[column] not in values:
            return SkippedFile(path, f"unknown {column} {str(record[column])[:40]!r} in a stability record")
    if record["pin_set"] is not None and not SAFE_NAME.match(str(record["pin_set"])):
        return SkippedFile(path, f"invalid pin_set {str(record['pin_set'])[:40]!r} in a stability record")
    record[SOURCE_COLUMN] = str(path)
    return record


def newest_stability(records: list[dict]) -> tuple[list[dict], list[str]]:
    """One record per key (fwbench.core.stability.record_key: the fits' cell identity and planted fault): the newest
    (started_at) wins, said out loud. Records of other steps, seeds, devices or faults are all kept."""
    by_key: dict[tuple, list[dict]] = {}
    for record in records:
        by_key.setdefault(stability_core.record_key(record), []).append(record)
    kept, notes = [], []
    for group in by_key.values():
        ranked = sorted(group, key=lambda r: (r["started_at"] is not None, r["started_at"] or 0, r[SOURCE_COLUMN]))
        kept.append(ranked[-1])
        for loser in ranked[:-1]:
            notes.append(f"stability {loser['stack']} {loser['task']} {loser['precision']} appears more than once: "
                         f"kept {ranked[-1][SOURCE_COLUMN]}, dropped {loser[SOURCE_COLUMN]}")
    return kept, notes


def is_within(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent.resolve())
        return True
    except ValueError:
        return False


def read_result_file(path: Path) -> pa.Table | SkippedFile:
    """The file's rows cast to the schema (plus `source_file`), or why it cannot be used."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(512)
            f.seek(max(size - 4, 0))
            tail = f.read(4)
    except OSError as exc:
        return SkippedFile(path, f"cannot read file ({exc.strerror or exc})")
    if size == 0:
        return SkippedFile(path, "empty file (0 bytes)")
    if not head.startswith(PARQUET_MAGIC):
        if _looks_like_text(head):
            return SkippedFile(path, "not a Parquet file: it is text (a CSV renamed to .parquet?)")
        return SkippedFile(path, "not a Parquet file (no PAR1 header)")
    if size < 12 or tail != PARQUET_MAGIC:
        return SkippedFile(path, f"truncated Parquet file ({size} bytes, no PAR1 footer; interrupted write?)")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        return SkippedFile(path, f"unreadable Parquet ({_first_line(exc)})")
    return _validate(path, table)


def _validate(path: Path, table: pa.Table) -> pa.Table | SkippedFile:
    names = set(table.column_names)
    # Version first: a newer writer may have renamed columns, and "upgrade fwbench" is the useful hint.
    if "schema_version" in names:
        versions = [v for v in table.column("schema_version").to_pylist() if v is not None]
        try:
            newest = max(int(v) for v in versions) if versions else None
        except (TypeError, ValueError):
            return SkippedFile(path, "schema_version is not an integer (not an fwbench result file)")
        if newest is not None and newest > SCHEMA_VERSION:
            return SkippedFile(path, f"written with schema_version {newest}, newer than the supported "
                                     f"{SCHEMA_VERSION} (upgrade fwbench to read it)")
        if newest is None or min(int(v) for v in versions) < 1 or len(versions) < table.num_rows:
            return SkippedFile(path, "missing or invalid schema_version (not an fwbench result file)")
        # Newer versions only added columns: read them as empty.
        for version in range(newest + 1, SCHEMA_VERSION + 1):
            for name in ADDED_IN[version]:
                if name not in names:
                    table = table.append_column(SCHEMA.field(name), pa.nulls(table.num_rows, SCHEMA.field(name).type))
            names = set(table.column_names)
    missing = [name for name in COLUMN_NAMES if name not in names]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        return SkippedFile(path, f"not an fwbench result file: missing columns {shown}")
    if table.num_rows == 0:
        return SkippedFile(path, "no rows")
    try:
        table = table.select(list(COLUMN_NAMES)).cast(SCHEMA)
    except (pa.ArrowException, ValueError) as exc:
        return SkippedFile(path, f"column types differ from schema v{SCHEMA_VERSION} ({_first_line(exc)})")
    statuses = set(table.column("status").to_pylist())
    unknown = statuses - set(STATUSES)
    if unknown:
        return SkippedFile(path, f"unknown status {sorted(map(str, unknown))} (expected one of {', '.join(STATUSES)})")
    ok = pc.equal(table.column("status"), "ok")
    if pc.any(pc.and_(ok, pc.is_null(table.column("ms_per_step")))).as_py():
        return SkippedFile(path, "a row has status ok but no ms_per_step")
    ms = pc.fill_null(table.column("ms_per_step"), 1.0)
    usable = pc.and_(pc.is_finite(ms), pc.greater(ms, 0.0))
    if pc.any(pc.and_(ok, pc.invert(usable))).as_py():
        return SkippedFile(path, "a row has status ok but ms_per_step is not a positive finite number")
    steps = pc.list_flatten(pc.filter(table.column("step_ms"), ok))
    good_steps = pc.fill_null(pc.and_(pc.is_finite(steps), pc.greater(steps, 0.0)), False)  # a null step is bad too
    if pc.any(pc.invert(good_steps)).as_py():
        return SkippedFile(path, "a row has status ok but a step_ms value that is not a positive finite number")
    empty = [name for name in REQUIRED_VALUES if pc.any(pc.is_null(table.column(name))).as_py()]
    if empty:
        return SkippedFile(path, f"a row has no value in {', '.join(empty)}")
    table = upgrade_axes(table)
    problem = _identity_problem(table)
    if problem:
        return SkippedFile(path, problem)
    return table.append_column(pa.field(SOURCE_COLUMN, pa.string()),
                               pa.array([str(path)] * table.num_rows, pa.string()))


def upgrade_axes(table: pa.Table) -> pa.Table:
    """Every row's identity columns as the current schema has them (fwbench.core.axes.current_values: a row written
    before an axis existed holds the value it was measured at), so no consumer reads an old row's quirks."""
    rows = [axes.current_values(row) for row in table.select(axes.columns_read()).to_pylist()]
    for axis in axes.AXES:
        index = table.schema.get_field_index(axis.column)
        values = pa.array([row[axis.column] for row in rows], type=table.schema.field(index).type)
        table = table.set_column(index, axis.column, values)
    return table



def _identity_problem(table: pa.Table) -> str | None:
    """Result files are untrusted input: every identity field must be a known value or match a strict
    pattern (row content is shown in reports, and must never be able to name a file)."""
    known = {"stack": registry.STACKS, "task": registry.TASKS, "preset": registry.PRESETS,
             "tf32_setting": ("default", "on", "off"), "jit_policy": registry.JIT_POLICIES}
    columns = ["stack", "task", "preset", "compile_mode", "tf32_setting", "jit_policy", "pin_set", "image_variant",
               "repeat", "cell_id"] + (["precision"] if "precision" in table.column_names else [])  # schema v7
    with_model_file = "model_sha256" in table.column_names  # schema v11
    rows = table.select(columns + (["model_sha256"] if with_model_file else [])).to_pylist()
    for row in rows:
        for column, values in known.items():
            if column == "task" and row.get("model_sha256") is not None:
                continue  # a model file's task: checked below
            if row[column] is not None and row[column] not in values:
                return f"unknown {column} {str(row[column])[:40]!r}"
        if row.get("model_sha256") is not None and not (
                registry.model_file_task(row["task"]) and model_file.SHA256.match(str(row["model_sha256"]))):
            return f"invalid model-file task {str(row['task'])[:60]!r} or model_sha256"
        if row["compile_mode"] not in registry.STACKS[row["stack"]].compile_modes:
            return f"unknown compile_mode {str(row['compile_mode'])[:40]!r} for stack {row['stack']}"
        for column in ("pin_set", "image_variant"):
            if row[column] is not None and not SAFE_NAME.match(str(row[column])):
                return f"invalid {column} {str(row[column])[:40]!r}"
        if row["repeat"] is None or not 0 <= row["repeat"] < 10_000:
            return f"invalid repeat {row['repeat']!r}"
        if row.get("precision") is not None and row["precision"] not in PRECISIONS:
            return f"unknown precision {str(row['precision'])[:40]!r}"
        if row["cell_id"] != CellIdentity(row["stack"], row["task"], row["preset"], row["compile_mode"], ()).cell_key:
            return f"cell_id {str(row['cell_id'])[:80]!r} does not match the row's stack, task, preset and compile mode"
    return None


def _looks_like_text(head: bytes) -> bool:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(ch.isprintable() or ch in "\r\n\t" for ch in text)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def deduplicate(table: pa.Table) -> tuple[pa.Table, list[str]]:
    """One row per record_id, then one per (cell identity, repeat), by the rule --resume follows too
    (fwbench.core.results.preferred_row_key): an ok row over any other, then a quiet row over a busy one, then the
    newest started_at (a failed re-run written beside an ok row never hides it: the runner keeps both). A read-time
    choice: every row stays on disk.

    Rows of different identities (another TF32 setting, thread count, device...) are all kept."""
    notes: list[str] = []
    rows = table.to_pylist()
    first_by_record: dict[str, int] = {}
    for index, row in enumerate(rows):
        if row["record_id"] in first_by_record:
            kept = rows[first_by_record[row["record_id"]]][SOURCE_COLUMN]
            notes.append(f"duplicate record {row['record_id']}: kept {kept}, ignored the copy in {row[SOURCE_COLUMN]}")
        else:
            first_by_record[row["record_id"]] = index
    by_cell: dict[tuple, list[int]] = {}
    for index in first_by_record.values():
        row = rows[index]
        by_cell.setdefault((CellIdentity.of_row(row), row["repeat"]), []).append(index)
    keep: list[int] = []
    for (identity, repeat), indices in by_cell.items():
        cell_id = f"{identity.cell_key} (settings {identity.settings_id})"
        # Ties go to the later file name so the choice is stable.
        ranked = sorted(indices, key=lambda i: (preferred_row_key(rows[i]), rows[i][SOURCE_COLUMN]))
        winner = ranked[-1]
        keep.append(winner)
        for loser in ranked[:-1]:
            kept = _why_kept(rows[winner], rows[loser])
            notes.append(f"cell {cell_id} repeat {repeat} appears more than once: kept {kept} "
                         f"({rows[winner]['started_at']}, {rows[winner][SOURCE_COLUMN]}), dropped "
                         f"{rows[loser]['started_at']} from {rows[loser][SOURCE_COLUMN]}")
    return table.take(sorted(keep)), notes


def _why_kept(winner: dict, loser: dict) -> str:
    """Which part of preferred_row_key (ok, quiet, started_at) told the two rows apart."""
    (winner_ok, winner_quiet), (loser_ok, loser_quiet) = preferred_row_key(winner)[:2], preferred_row_key(loser)[:2]
    if winner_ok != loser_ok:
        return "the ok row"
    return "the quiet row" if winner_quiet != loser_quiet else "the newest"


def load_results(result_dirs: list[Path], exclude: Path | None = None, *,
                 stability_only_ok: bool = False) -> LoadedResults:
    """Validate every result file under the dirs and merge the good ones (NoResultsError if none; with
    stability_only_ok, stability records alone are enough: the report has a section for them, compare does not)."""
    found = find_result_files(result_dirs, exclude)
    where = ", ".join(str(d) for d in result_dirs)
    if not found:
        raise NoResultsError(f"no result files (*.parquet) found under {where}")
    tables: list[pa.Table] = []
    skipped: list[SkippedFile] = []
    stability_records: list[dict] = []
    for path in found:
        if is_stability_file(path):
            outcome = read_stability_file(path)
            (skipped if isinstance(outcome, SkippedFile) else stability_records).append(outcome)
            continue
        outcome = read_result_file(path)
        (skipped if isinstance(outcome, SkippedFile) else tables).append(outcome)
    if not tables and not (stability_only_ok and stability_records):
        problem = (f"first problem: {skipped[0].line()}" if skipped else
                   "they are stability records (fwbench stability), no cell rows")
        raise NoResultsError(f"none of the {len(found)} result files under {where} is usable ({problem})",
                             skipped=skipped)
    # Stability records alone make a report too (its stability section): the cell rows are then none.
    merged, notes = (deduplicate(pa.concat_tables(tables).cast(MERGED_SCHEMA)) if tables
                     else (MERGED_SCHEMA.empty_table(), []))
    kept, stability_notes = newest_stability(stability_records)
    return LoadedResults(merged, len(found), skipped, notes + stability_notes, kept)


def write_merged(table: pa.Table, path: Path) -> Path:
    """merged.parquet: plain Parquet with the result schema, readable by pandas, Polars and DuckDB."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path
