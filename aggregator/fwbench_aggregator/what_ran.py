"""The report's first lines: what ran, read from the rows the report shows (devices with what each ran, CPU,
driver, engine and environments, pin sets, presets, precisions, repeats, parallelism, fwbench version and source
commit, schema versions, when), so that no number is read without them. Settings are read as the cell identity reads
them (fwbench.core.identity), so an old row's precision and device are the ones its tables count it under."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from fwbench.core import precision, registry
from fwbench.core.identity import CellIdentity
from fwbench.core.schema import SCHEMA_VERSION
from fwbench_aggregator import document as d

UNKNOWN_COMMIT = "unknown"  # what a row says when its cell could not tell (fwbench.harness.envinfo)
SHORT_COMMIT = 12  # as the release record shortens a commit


def _values(frame: pd.DataFrame, column: str) -> list[str]:
    if column not in frame:
        return []
    return [str(v) for v in dict.fromkeys(frame[column].dropna()) if str(v).strip()]


def _joined(values: list[str], none: str = "not recorded") -> str:
    return ", ".join(values) if values else none


def _rows(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


def _in_order(values, order) -> list[str]:
    """The distinct values, those in `order` first and in its order, then the others as they came."""
    distinct = list(dict.fromkeys(str(v) for v in values))
    return sorted(distinct, key=lambda v: (order.index(v) if v in order else len(order), distinct.index(v)))


def read_as_identity(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with each row's cell identity (`_identity`) and the device model, precision and device kind it is
    counted under: `_device_model`, `_precision` and `_device_kind` (gpu, cpu, or unknown where the row does not
    say)."""
    identities = [CellIdentity.of_row(row) for row in frame.to_dict("records")]
    models = [str(i.setting("device_model") or "unknown device") for i in identities]
    device = frame["device"] if "device" in frame else pd.Series([None] * len(frame), index=frame.index)
    # A failed row written by the runner has no `device`: it ran on the GPU model an ok row names as one.
    gpu_models = {m for m, kind in zip(models, device) if kind == "cuda"}
    cpu_models = {m for m, kind in zip(models, device) if kind == "cpu"}
    kinds = ["gpu" if kind == "cuda" else "cpu" if kind == "cpu" else
             "gpu" if model in gpu_models else "cpu" if model in cpu_models else "unknown"
             for model, kind in zip(models, device)]
    return frame.assign(_identity=identities, _device_model=models, _device_kind=kinds,
                        _precision=[str(i.setting("precision")) for i in identities])


def _what_each_ran(rows: pd.DataFrame, *, with_precisions: bool) -> str:
    """'paper' or, where the rows have several precisions, 'paper (published, tf32)': the tables a device's rows
    are in."""
    parts = []
    for preset in _in_order(rows["preset"].dropna(), list(registry.PRESETS)):
        of_preset = rows[rows["preset"].astype(str) == preset]
        ran_at = _in_order(of_preset["_precision"], list(precision.PRECISIONS))
        parts.append(f"{preset} ({', '.join(ran_at)})" if with_precisions else preset)
    return ", ".join(parts) or "no preset recorded"


def devices(read: pd.DataFrame) -> str:
    """Every device model the rows ran on, GPUs first, with the presets (and precisions) each ran:
    '1x NVIDIA H100 80GB HBM3 (driver 580.159.04, CUDA 13.0): paper; CPU AMD EPYC (family 26, model 2): tiny'."""
    with_precisions = read["_precision"].nunique() > 1
    parts = []
    gpu = read[read["_device_kind"] == "gpu"]
    for model, rows in gpu.groupby("_device_model", sort=False):
        counts = sorted({int(c) for c in rows.get("device_count", pd.Series(dtype=float)).dropna()}) or [1]
        drivers = _values(rows, "gpu_driver")
        cuda = _values(rows, "cuda_driver")
        extra = ", ".join(filter(None, [f"driver {_joined(drivers)}" if drivers else "",
                                        f"CUDA {_joined(cuda)}" if cuda else ""]))
        parts.append(f"{'/'.join(map(str, counts))}x {model}" + (f" ({extra})" if extra else "")
                     + f": {_what_each_ran(rows, with_precisions=with_precisions)}")
    for kind, label in (("cpu", "CPU {}"), ("unknown", "{} (device not recorded)")):
        of_kind = read[read["_device_kind"] == kind]
        for model, rows in of_kind.groupby("_device_model", sort=False):
            parts.append(f"{label.format(model)}: {_what_each_ran(rows, with_precisions=with_precisions)}")
    return ("" if len(gpu) else "CPU only (no row ran on a GPU); ") + "; ".join(parts)


def precisions(read: pd.DataFrame) -> str:
    return ", ".join(_in_order(read["_precision"], list(precision.PRECISIONS)))


def cpus(frame: pd.DataFrame) -> str:
    models = _values(frame, "cpu_model")
    cores = sorted({int(c) for c in frame["cpu_count"].dropna()}) if "cpu_count" in frame else []
    threads = sorted({int(t) for t in frame["threads"].dropna()}) if "threads" in frame else []
    return (f"{_joined(models)}, {'/'.join(map(str, cores)) or '?'} cores"
            + (f"; cells used {'/'.join(map(str, threads))} threads" if threads else ""))


def environments(frame: pd.DataFrame) -> str:
    digests = _values(frame, "image_digest")
    variants = _values(frame, "image_variant")
    return _joined(digests) if digests else f"image variant / environment: {_joined(variants)}"


def repeats(read: pd.DataFrame) -> str:
    """Ok repeats per cell identity ('3', or '2-3'), with the failed ones apart: they are in no estimate."""
    ok_repeats: dict[CellIdentity, set] = {}
    for identity, status, repeat in zip(read["_identity"], read["status"], read["repeat"]):
        ok_repeats.setdefault(identity, set())
        if status == "ok":
            ok_repeats[identity].add(repeat)
    failed = Counter(str(status) for status in read["status"] if status != "ok")
    counts = [len(r) for r in ok_repeats.values() if r]
    fewest, most = (min(counts), max(counts)) if counts else (0, 0)
    ok = "none" if not counts else str(fewest) if fewest == most else f"{fewest}-{most}"
    if not failed:
        return ok
    total = sum(failed.values())
    by_status = ", ".join(f"{status} {n}" for status, n in failed.most_common())
    without_ok = sum(1 for r in ok_repeats.values() if not r)
    return (f"{ok} ok ({total} failed {'repeat' if total == 1 else 'repeats'} not counted: {by_status}"
            + (f"; {without_ok} {'cell' if without_ok == 1 else 'cells'} without an ok repeat" if without_ok else "")
            + ")")


def parallelism(frame: pd.DataFrame) -> str:
    at_once = int(frame["parallel_cells"].fillna(1).max()) if "parallel_cells" in frame and len(frame) else 1
    return "one cell at a time" if at_once <= 1 else f"up to {at_once} cells at once (each on cores of its own)"


def _runs(frame: pd.DataFrame) -> str:
    runs = _values(frame, "run_id")
    return f"run {runs[0]}" if len(runs) == 1 else f"{len(runs)} runs"


def source_commits(frame: pd.DataFrame) -> str:
    """'source commit(s) 0123456789ab, fedcba987654 (2 rows unknown)': rows before schema v14, and cells that could not
    tell, are unknown."""
    recorded = frame["source_commit"] if "source_commit" in frame else pd.Series([None] * len(frame))
    known = [str(c).strip() for c in recorded if isinstance(c, str) and c.strip() and c.strip() != UNKNOWN_COMMIT]
    unknown = len(recorded) - len(known)
    if not known:
        return f"source commit(s) unknown ({_rows(unknown)})"
    shown = ", ".join(dict.fromkeys(c[:SHORT_COMMIT] for c in known))
    return f"source commit(s) {shown}" + (f" ({_rows(unknown)} unknown)" if unknown else "")


def schema_versions(frame: pd.DataFrame) -> str:
    """'schema v14', or 'schema v6, v13 (read as v14)' where older rows were read with the newer columns empty."""
    found = sorted({int(v) for v in frame["schema_version"].dropna()}) if "schema_version" in frame else []
    if not found:
        return "schema not recorded"
    listed = "schema " + ", ".join(f"v{v}" for v in found)
    return listed if found == [SCHEMA_VERSION] else f"{listed} (read as v{SCHEMA_VERSION})"


def block(frame: pd.DataFrame) -> list:
    """The header of exactly the rows in `frame`."""
    if frame.empty:
        return []
    read = read_as_identity(frame)
    started = pd.to_datetime(frame["started_at"], utc=True, errors="coerce").dropna() if "started_at" in frame else []
    when = (f"{started.min():%Y-%m-%d %H:%M} to {started.max():%Y-%m-%d %H:%M} UTC" if len(started) else "not recorded")
    items = [f"Devices: {devices(read)}",
             f"CPU: {cpus(frame)}",
             f"Engine: {_joined(_values(frame, 'engine'))}; {environments(frame)}",
             f"Pin sets: {_joined(_values(frame, 'pin_set'))}; presets: {_joined(_values(frame, 'preset'))}; "
             f"precisions: {precisions(read)}",
             f"Repeats per cell: {repeats(read)}; {parallelism(frame)}",
             f"fwbench {_joined(_values(frame, 'fwbench_version'))}, {source_commits(frame)}; "
             f"{schema_versions(frame)}; {_runs(frame)}; measured {when}"]
    return [d.Heading("What ran"), d.BulletList(items, "note")]
