"""The report's first lines: what ran, read from the rows (devices, CPU, driver, engine and environments, pin
sets, presets, precisions, repeats, parallelism, fwbench version, when), so that no number is read without them."""

from __future__ import annotations

import pandas as pd

from fwbench_aggregator import document as d


def _values(frame: pd.DataFrame, column: str) -> list[str]:
    if column not in frame:
        return []
    return [str(v) for v in dict.fromkeys(frame[column].dropna()) if str(v).strip()]


def _joined(values: list[str], none: str = "not recorded") -> str:
    return ", ".join(values) if values else none


def devices(frame: pd.DataFrame) -> str:
    """'1x NVIDIA H100 80GB HBM3 (driver 580.159.04, CUDA 13.0)' per GPU model; 'CPU only' where no row ran on one."""
    gpu = frame[frame["device"] == "cuda"] if "device" in frame else frame.iloc[0:0]
    parts = []
    for model, rows in gpu.groupby(gpu["device_model"].astype(str)) if len(gpu) else []:
        counts = sorted({int(c) for c in rows.get("device_count", pd.Series(dtype=float)).dropna()}) or [1]
        drivers = _values(rows, "gpu_driver")
        cuda = _values(rows, "cuda_driver")
        extra = ", ".join(filter(None, [f"driver {_joined(drivers)}" if drivers else "",
                                        f"CUDA {_joined(cuda)}" if cuda else ""]))
        parts.append(f"{'/'.join(map(str, counts))}x {model}" + (f" ({extra})" if extra else ""))
    return "; ".join(parts) if parts else "CPU only (no row ran on a GPU)"


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


def repeats(frame: pd.DataFrame) -> str:
    per_cell = frame.groupby(["cell_id", "settings_id"], dropna=False)["repeat"].nunique() if "settings_id" in frame \
        else frame.groupby("cell_id")["repeat"].nunique()
    low, high = int(per_cell.min()), int(per_cell.max())
    return str(low) if low == high else f"{low}-{high}"


def parallelism(frame: pd.DataFrame) -> str:
    at_once = int(frame["parallel_cells"].fillna(1).max()) if "parallel_cells" in frame and len(frame) else 1
    return "one cell at a time" if at_once <= 1 else f"up to {at_once} cells at once (each on cores of its own)"


def _runs(frame: pd.DataFrame) -> str:
    runs = _values(frame, "run_id")
    return f"run {runs[0]}" if len(runs) == 1 else f"{len(runs)} runs"


def block(frame: pd.DataFrame) -> list:
    if frame.empty:
        return []
    started = pd.to_datetime(frame["started_at"], utc=True, errors="coerce").dropna() if "started_at" in frame else []
    when = (f"{started.min():%Y-%m-%d %H:%M} to {started.max():%Y-%m-%d %H:%M} UTC" if len(started) else "not recorded")
    items = [f"Devices: {devices(frame)}",
             f"CPU: {cpus(frame)}",
             f"Engine: {_joined(_values(frame, 'engine'))}; {environments(frame)}",
             f"Pin sets: {_joined(_values(frame, 'pin_set'))}; presets: {_joined(_values(frame, 'preset'))}; "
             f"precisions: {_joined(_values(frame, 'precision'), 'as published')}",
             f"Repeats per cell: {repeats(frame)}; {parallelism(frame)}",
             f"fwbench {_joined(_values(frame, 'fwbench_version'))}; {_runs(frame)}; measured {when}"]
    commands = _values(frame, "command_line")
    revisions = _values(frame, "git_revision")
    if commands or revisions:
        items.append(f"Command: {_joined(commands)}; commit: {_joined(revisions)}")
    return [d.Heading("What ran"), d.BulletList(items, "note")]
