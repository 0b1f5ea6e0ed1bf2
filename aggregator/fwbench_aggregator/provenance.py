"""Where every number came from: one line per row, plus the distinct library-version sets.

Library versions are long JSON objects; listing each distinct set once (E1, E2...) and pointing to it from
the rows keeps the table readable while still showing every row's exact versions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

from fwbench_aggregator.variants import Variant, task_order

PROVENANCE_HEADERS = ("preset", "task", "stack", "compile", "repeat", "status", "busy", "ms/step", "settings id",
                      "env", "framework",
                      "pin set", "engine", "image", "device", "TF32 (setting / matmul / effective)",
                      "matmul precision", "compile took effect", "compiled graphs", "graph breaks",
                      "cudagraph skips", "threads", "CPUs", "GPU", "cells at once", "started (UTC)", "source file")


@dataclass(frozen=True)
class EnvironmentSet:
    name: str
    python: str
    versions: dict[str, str]


def _text(value) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)) or value is pd.NA:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _number(value) -> str:
    if value is None or pd.isna(value):
        return "—"
    return str(int(value))


def _flag(value) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and pd.isna(value)):
        return "—"
    return "yes" if bool(value) else "no"


def _busy(row) -> str:
    flag = _flag(row.get("busy"))
    return f"yes: {row.get('busy_reasons') or '?'}" if flag == "yes" else flag


def environment_sets(frame: pd.DataFrame) -> tuple[list[EnvironmentSet], dict]:
    """Distinct (python, library_versions) pairs, named E1.. in first-seen order; row index -> name."""
    sets: dict[tuple, EnvironmentSet] = {}
    by_row = {}
    for index, row in frame.iterrows():
        raw = row.get("library_versions")
        try:
            versions = json.loads(raw) if isinstance(raw, str) and raw else {}
        except json.JSONDecodeError:
            versions = {"(unparsed)": str(raw)}
        key = (_text(row.get("python_version")), json.dumps(versions, sort_keys=True))
        if key not in sets:
            sets[key] = EnvironmentSet(f"E{len(sets) + 1}", key[0], dict(sorted(versions.items())))
        by_row[index] = sets[key].name
    return list(sets.values()), by_row


def provenance_rows(frame: pd.DataFrame) -> list[list[str]]:
    _, env_of = environment_sets(frame)
    order = {t: i for i, t in enumerate(task_order(frame["task"].dropna().unique()))}
    frame = frame.assign(_task_rank=frame["task"].map(order),
                         _variant_rank=[Variant(str(s), str(m)).sort_key()
                                        for s, m in zip(frame["stack"], frame["compile_mode"])])
    rows = []
    for index, row in frame.sort_values(["preset", "_task_rank", "_variant_rank", "repeat"]).iterrows():
        image = row.get("image_digest") or row.get("image_id")
        device = _text(row.get("device"))
        if row.get("device_name"):
            device += f" ({row['device_name']})"
        tf32 = " / ".join((_text(row.get("tf32_setting")), _flag(row.get("tf32_matmul")),
                           _flag(row.get("tf32_effective"))))
        framework = f"{_text(row.get('framework'))} {_text(row.get('framework_version'))}"
        ms = row.get("ms_per_step")
        started = row.get("started_at")
        rows.append([
            _text(row["preset"]), _text(row["task"]), _text(row["stack"]), _text(row["compile_mode"]),
            _number(row["repeat"]), _text(row["status"]), _busy(row),
            "—" if ms is None or pd.isna(ms) else f"{ms:.3f}", _text(row.get("settings_id")),
            env_of[index], framework, _text(row.get("pin_set")), _text(row.get("engine")), _text(image),
            device, tf32, _text(row.get("matmul_precision")), _flag(row.get("compile_took_effect")),
            _number(row.get("compiled_graphs")), _number(row.get("graph_breaks")),
            _number(row.get("cudagraph_skips")), _number(row.get("threads")), _text(row.get("cpu_set")),
            _number(row.get("gpu_index")), _number(row.get("parallel_cells")),
            "—" if started is None or pd.isna(started) else pd.Timestamp(started).strftime("%Y-%m-%d %H:%M:%S"),
            _text(row.get("source_file")),
        ])
    return rows


def compile_warnings(frame: pd.DataFrame) -> list[str]:
    """Compiled variants whose compilation did not take effect: their numbers are really eager numbers."""
    warnings = []
    native = frame[(frame["stack"] == "native-torch") & (frame["compile_mode"] != "none") & (frame["status"] == "ok")]
    for _, row in native.iterrows():
        took = row.get("compile_took_effect")
        graphs = row.get("compiled_graphs")
        if (took is not None and not pd.isna(took) and not bool(took)) or (graphs is not None and not pd.isna(graphs)
                                                                            and int(graphs) == 0):
            warnings.append(f"{row['cell_id']} repeat {_number(row['repeat'])}: compile mode "
                            f"{row['compile_mode']} but compilation did not take effect "
                            f"(compile_took_effect={_flag(took)}, compiled_graphs={_number(graphs)})")
        elif graphs is not None and not pd.isna(row.get("graph_breaks")) and int(row["graph_breaks"]) > 0:
            warnings.append(f"{row['cell_id']} repeat {_number(row['repeat'])}: {int(row['graph_breaks'])} "
                            f"graph breaks (partly eager)")
    return warnings
