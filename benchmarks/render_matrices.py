"""Markdown for the feature matrices and the workload logs of docs/workloads.md and docs/your-model.md, from their
JSON files under benchmarks/results/<date>-<machine>/ (benchmarks/measurement_log.py's shape).

    python benchmarks/render_matrices.py FILE...

Per file, by its "benchmark":

- precision_matrix.py: one table per precision (task x stack) of each cell's status: ok with the compute dtype,
  diverged with its non-finite losses, or unsupported / error with the reason, as the script prints it;
- scaling_matrix.py: one table (task and device count x stack): ok with the collectives, or the reason;
- anything else: its heading (when, where, the command, settings, source), its figures, its rows' table (its
  "columns": [key, heading] or [key, heading, format]) and its notes; with "group_by", one table per value of
  that row key, headed "#### VALUE".

Formats are render_measurements.py's (a format spec, "range" + spec, "x" + spec). Files written by
the scripts' --json carry their run's commit; files transcribed from a log say so in "source". It reads JSON and
never measures (benchmarks/docblocks.py checks the blocks made with it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from render_measurements import cell, command_text, figure_table, heading, load, provenance, table

# The matrices: each cell as the scripts print it (precision_matrix.cell_text, scaling_matrix.cell_text).

def precision_cell(row: dict | None) -> str:
    if row is None:
        return "—"
    if row["status"] == "ok":
        return f"ok ({row.get('compute_dtype') or '?'})"
    if row["status"] == "diverged":
        return f"diverged ({row.get('nonfinite_losses')} non-finite)"
    return f"{row['status']}: {row.get('reason') or ''}"


def scaling_cell(row: dict | None) -> str:
    if row is None:
        return "—"
    if row["status"] == "ok":
        return f"ok ({row.get('comm_backend') or 'one device'})"
    return f"{row['status']}: {row.get('reason') or ''}"


def ordered(found: dict, setting: str, key: str) -> list:
    """The settings' order of stacks, tasks...; else the order the rows first name them in."""
    return found.get("settings", {}).get(setting) or list(dict.fromkeys(row[key] for row in found["rows"]))


def precision_matrix(found: dict) -> str:
    stacks, tasks = ordered(found, "stacks", "stack"), ordered(found, "tasks", "task")
    lines = [f"Precision matrix, tiny preset, {found['machine']}, {found['date']}: {command_text(found)};"
             " ok rows show the compute dtype inspected from what ran. " + provenance(found), ""]
    for value in ordered(found, "precisions", "precision"):
        rows = {(row["stack"], row["task"]): row for row in found["rows"] if row["precision"] == value}
        lines += [f"`--precision {value}`", "", "| task | " + " | ".join(stacks) + " |",
                  "|---|" + "---|" * len(stacks)]
        for task in tasks:
            lines.append(f"| {task} | " + " | ".join(precision_cell(rows.get((stack, task))) for stack in stacks)
                         + " |")
        lines.append("")
    return "\n".join(lines + extras(found)).rstrip("\n")


def scaling_matrix(found: dict) -> str:
    stacks, tasks = ordered(found, "stacks", "stack"), ordered(found, "tasks", "task")
    counts = ordered(found, "devices", "devices")
    rows = {(row["stack"], row["task"], int(row["devices"])): row for row in found["rows"]}
    lines = [f"Data-parallel matrix, tiny preset, {found['machine']}, {found['date']}: "
             f"{command_text(found)}; CPU devices: correctness, no speed claim. " + provenance(found), "",
             "| task | devices | " + " | ".join(stacks) + " |", "|---|---|" + "---|" * len(stacks)]
    for task in tasks:
        for count in counts:
            lines.append(f"| {task} | {count} | "
                         + " | ".join(scaling_cell(rows.get((stack, task, int(count)))) for stack in stacks) + " |")
    return "\n".join(lines + [""] + extras(found)).rstrip("\n")


# Any other log.

def extras(found: dict) -> list[str]:
    """A matrix's or log's single figures and notes, after its tables."""
    lines = []
    if found.get("figures"):
        lines += [*figure_table(found["figures"]), ""]
    if found.get("notes"):
        lines += [f"- {note}" for note in found["notes"]] + [""]
    return lines


def fastest_line(rows: list[dict]) -> str:
    """The report's first line of a "Your models" table (its judge of 2026-11-26): the fastest backend, the next
    one's ratio, and the backends whose ratio's interval reaches below 1."""
    first, after = rows[0], rows[1:]
    if not after:
        return f"Fastest: {first['backend']} at {first['ms_per_step']:#.4g} ms/step."
    second = after[0]
    ratio = cell(second["x_fastest"], "x.2f", second, "x_fastest")
    line = (f"Fastest: {first['backend']} at {first['ms_per_step']:#.4g} ms/step, {ratio} faster than the next, "
            f"{second['backend']}")
    close = [row["backend"] for row in after if row.get("x_fastest_low") is not None and row["x_fastest_low"] < 1]
    if close:
        line += f"; but its interval overlaps too much with {', '.join(close)}'s to rank them apart"
    return line + "."


def twin_notes(rows: list[dict]) -> list[str]:
    return [f"- {row['backend']}: the PyTorch twin has the Keras model's {row['trainable_params']:,} trainable "
            "parameters" for row in rows if row.get("twin_params_match")]


def log(found: dict) -> str:
    parts = [heading(found)]
    if found.get("figures") or found.get("notes"):
        parts.append("\n".join(extras(found)).rstrip("\n"))
    rows, columns = found.get("rows") or [], found.get("columns")
    if rows and found.get("group_by"):
        key = found["group_by"]
        for group in dict.fromkeys(row[key] for row in rows):
            chosen = [row for row in rows if row[key] == group]
            section = [f"#### {group}"]
            if found.get("fastest_line"):
                section.append(fastest_line(chosen))
            section.append("\n".join(table(chosen, columns)))
            if twin_notes(chosen):
                section.append("\n".join(twin_notes(chosen)))
            parts += section
    elif rows:
        parts.append("\n".join(table(rows, columns)))
    return "\n\n".join(parts)


def render(found: dict) -> str:
    if found["benchmark"] == "precision_matrix.py":
        return precision_matrix(found)
    if found["benchmark"] == "scaling_matrix.py":
        return scaling_matrix(found)
    return log(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    print("\n\n".join(render(load(path)) for path in args.files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
