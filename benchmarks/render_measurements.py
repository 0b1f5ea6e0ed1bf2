"""Markdown tables of the harness's own measurements, from their files under benchmarks/results/<date>-<machine>/.

    python benchmarks/render_measurements.py FILE...            # per file: its run's heading, figures, table, notes
    python benchmarks/render_measurements.py --targets FILE...  # per harness_noise.py cell, its latest verdicts

The files are what the benchmarks' --json writes (benchmarks/measurement_log.py), or runs transcribed from the
development log from before they wrote them (their "source" says so). It reads JSON and never measures:
docs/measurements.md's generated blocks are its output (benchmarks/docblocks.py checks them).

A file's table shows its "columns" ([key, heading] or [key, heading, format]) or its benchmark's defaults below;
a column no row fills is left out. Formats: a format spec (".3f", ".1%"); "ci" + spec, the value with its interval
from KEY_low and KEY_high and the verdict in KEY_verdict; "range" + spec, the value with its interval as
"v [low–high]"; "x" + spec the same with an "x" before it; "%" a level (0.975 -> 97.5%). A row's own "date" or "utc"
stands for a run of its own inside the file. benchmarks/render_matrices.py renders its logs with these pieces.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HARNESS_NOISE_COLUMNS = [
    ["utc", "UTC"], ["stack", "stack"], ["task", "task"], ["candidate", "measured"], ["runs", "rounds"],
    ["confidence", "level", "%"], ["fwbench_ms", "fwbench ms", ".3f"], ["plain_ms", "plain ms", ".3f"],
    ["fwbench_cv", "fwbench CV", ".1%"], ["plain_cv", "plain CV", ".1%"],
    ["spread_ratio", "spread ratio [CI]", "ci.2f"], ["ratio", "fwbench/plain [CI]", "ci.3f"], ["note", "note"]]
DEFAULT_COLUMNS = {
    "harness_noise.py": HARNESS_NOISE_COLUMNS,
    "jax_cache_ab.py": [["ratio", "ratio"], ["value", "value [95%]", "ci.4f"]],
    "first_contact.py": [
        ["stack", "stack"], ["interpreter_s", "interpreter", ".1f"], ["framework_import_s", "framework import", ".1f"],
        ["model_library_import_s", "model-library import", ".1f"], ["model_build_s", "model build", ".1f"],
        ["first_step_s", "first step", ".1f"], ["timed_steps_s", "timed steps", ".1f"],
        ["describing_s", "describing the run", ".1f"], ["teardown_s", "teardown", ".1f"], ["total_s", "total", ".1f"],
        ["jax_cache_warm", "JAX cache warm"]],
    "parallel_speedup.py": [["task", "task"], ["alone_ms", "alone ms [95%]", "ci.2f"],
                            ["parallel_ms", "parallel ms [95%]", "ci.2f"], ["within_noise", "within noise"]],
    "verify_overhead.py": [["phase", "phase"], ["median_s", "median s", ".2f"]],
}
# Image sizes (benchmarks/image_sizes.py --json, docs/docker.md) and the GPU images' builds beside them.
IMAGE_SIZE_COLUMNS = [["image", "image"], ["image_gb", "image size GB", ".2f"],
                      ["wheels_gb", "installed wheels GB", ".2f"], ["ratio", "ratio", ".2f"], ["note", "note"]]
DEFAULT_COLUMNS["image_sizes.py"] = IMAGE_SIZE_COLUMNS
DEFAULT_COLUMNS["GPU image builds"] = [["image", "image"], ["image_gb", "image size GB", ".1f"],
                                       ["build", "build time"], ["peak_disk_gb", "disk at the build's peak GB", ".1f"],
                                       ["note", "note"]]
VERDICT_WORDS = ("meets", "misses")
# A "command" starting so is a command line (shown in backticks); else the log described the run in words.
COMMAND_STARTS = ("python", "<", ".ci/", "bash", "fwbench", "for ")


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def cell(value, spec: str | None = None, row: dict | None = None, key: str | None = None) -> str:
    if spec and spec.startswith("ci"):
        return interval(row, key, spec[2:])
    if value is None:
        return ""
    if spec and spec.startswith(("range", "x")) and not isinstance(value, str):
        prefix, spec = ("x", spec[1:]) if spec.startswith("x") else ("", spec[5:])
        text = prefix + format(value, spec)
        low, high = (row or {}).get(f"{key}_low"), (row or {}).get(f"{key}_high")
        if low is not None and high is not None:
            text += f" [{format(low, spec)}–{format(high, spec)}]"
        return text
    if spec == "%":
        return f"{100 * value:.4g}%"
    if spec and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, spec)
    if isinstance(value, list):
        return ", ".join(cell(item, spec) for item in value)
    return str(value).replace("|", "\\|")


def interval(row: dict, key: str, spec: str) -> str:
    """'1.030 [0.957, 1.109]: **misses**', from KEY, KEY_low, KEY_high and KEY_verdict (each may be absent)."""
    value, low, high = row.get(key), row.get(f"{key}_low"), row.get(f"{key}_high")
    if value is None:
        return ""
    text = format(value, spec)
    if low is not None and high is not None:
        text += f" [{format(low, spec)}, {format(high, spec)}]"
    verdict = row.get(f"{key}_verdict")
    if verdict:
        first, _, rest = verdict.partition(" ")
        text += f": **{first}**" + (f" {rest}" if rest else "") if first in VERDICT_WORDS else f": {verdict}"
    return text


def command_text(found: dict) -> str:
    """The command (in backticks where it is a command line) and what the log said of it ("command_note")."""
    command = found["command"]
    text = f"`{command}`" if command.startswith(COMMAND_STARTS) else command
    return text + (f" ({found['command_note']})" if found.get("command_note") else "")


def provenance(found: dict) -> str:
    return (f"Source: {found['source']}." if found.get("source")
            else f"Written by the run itself at commit {found.get('commit') or 'unknown'}.")


def heading(found: dict) -> str:
    when = found["date"] + (f" {found['utc']} UTC" if found.get("utc") else "")
    line = f"**{when}, {found['machine']}**: {command_text(found)}"
    if found.get("conditions"):
        line += f"; {found['conditions']}"
    lines = [line + "."]
    if found.get("settings"):
        lines.append("Settings: " + "; ".join(f"{name} {cell(value)}" for name, value in found["settings"].items())
                     + ".")
    if found.get("target"):
        lines.append(f"Target: {found['target']}.")
    lines.append(provenance(found))
    return " ".join(lines)


def figure_table(figures: list) -> list[str]:
    lines = ["| figure | value |", "|---|---|"]
    for figure in figures:
        label, value, spec = (*figure, None)[:3]
        lines.append(f"| {label} | {cell(value, spec)} |")
    return lines


def row_table(found: dict) -> list[str]:
    """The file's rows under its columns, or its benchmark's defaults."""
    rows = found.get("rows") or []
    return table(rows, found.get("columns") or DEFAULT_COLUMNS.get(found["benchmark"])) if rows else []


def table(rows: list[dict], columns: list | None) -> list[str]:
    if columns is None:  # a benchmark without defaults: every key, in the order the rows have them
        columns = [[key, key] for key in dict.fromkeys(key for row in rows for key in row)]
    shown = [column for column in columns if any(row.get(column[0]) is not None for row in rows)]
    lines = ["| " + " | ".join(column[1] for column in shown) + " |", "|" + "---|" * len(shown)]
    for row in rows:
        lines.append("| " + " | ".join(cell(row.get(key), (rest or [None])[0], row, key)
                                       for key, _, *rest in shown) + " |")
    return lines


def render(found: dict) -> str:
    parts = [heading(found)]
    if found.get("figures"):
        parts.append("\n".join(figure_table(found["figures"])))
    if found.get("rows"):
        parts.append("\n".join(row_table(found)))
    if found.get("notes"):
        parts.append("\n".join(f"- {note}" for note in found["notes"]))
    return "\n\n".join(parts)


def when(found: dict, row: dict) -> tuple[str, str]:
    """A row's run's start, for ordering: its own date and UTC times, else its file's."""
    return row.get("date") or found["date"], (row.get("utc") or found.get("utc") or "").split("-")[0]


def latest_cells(files: list[dict]) -> dict[str, list[tuple[dict, dict]]]:
    """Per machine and (stack, task), the latest harness_noise.py run of fwbench against the plain script (no
    candidate, no other option) that was given verdicts and that no busy row voided: (its file, its row)."""
    latest: dict[tuple, tuple[dict, dict]] = {}
    for found in files:
        if found["benchmark"] != "harness_noise.py":
            continue
        for row in found.get("rows") or []:
            verdicts = (row.get("spread_ratio_verdict"), row.get("ratio_verdict"))
            if row.get("candidate") or row.get("option") or None in verdicts or any(
                    verdict.startswith("void") for verdict in verdicts):
                continue
            key = (found["machine"], row["stack"], row["task"])
            if key not in latest or when(found, row) >= when(*latest[key]):
                latest[key] = (found, row)
    by_machine: dict[str, list[tuple[dict, dict]]] = {}
    for key in sorted(latest):
        by_machine.setdefault(key[0], []).append(latest[key])
    # the machine measured last first
    return dict(sorted(by_machine.items(), key=lambda item: max(when(*cell) for cell in item[1]), reverse=True))


def verify_flow_line(files: list[dict], machine: str) -> str | None:
    """The one-CPU verify flow's tries on a machine, all sets together."""
    rows = [row for found in files if found["benchmark"] == "one-CPU verify flow" and found["machine"] == machine
            for row in found.get("rows") or []]
    if not rows:
        return None
    total = {key: sum(row[key] for row in rows) for key in ("tries", "reproduced", "inconclusive", "slower_or_faster")}
    return (f"The one-CPU verify flow: {total['reproduced']} of {total['tries']} tries reproduced, "
            f"{total['inconclusive']} inconclusive, {total['slower_or_faster']} slower or faster.")


def targets(files: list[dict]) -> str:
    """Where harness_noise.py's two targets stand on each machine: per cell its latest verdicts, the count of each
    verdict, and the one-CPU verify flow's tries."""
    parts = []
    for machine, cells in latest_cells(files).items():
        lines = [f"**{machine}**", "",
                 "| stack | task | run | rounds | level | spread ratio [CI] | fwbench/plain [CI] |",
                 "|---|---|---|---|---|---|---|"]
        for found, row in cells:
            date, utc = when(found, row)
            lines.append(f"| {row['stack']} | {row['task']} | {date}{f' {utc} UTC' if utc else ''} | "
                         f"{cell(row.get('runs'))} | {cell(row.get('confidence'), '%')} | "
                         f"{interval(row, 'spread_ratio', '.2f')} | {interval(row, 'ratio', '.3f')} |")
        counts = []
        for key, name in (("spread_ratio_verdict", "Spread"), ("ratio_verdict", "ratio")):
            said = [row[key].split(" ")[0] for _, row in cells]
            counts.append(f"{name}: " + ", ".join(f"{word} {said.count(word)}"
                                                   for word in ("meets", "misses", "undecided")))
        lines += ["", f"{'; '.join(counts)} (of {len(cells)} cells)."]
        flow = verify_flow_line(files, machine)
        if flow:
            lines[-1] += " " + flow
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", action="store_true", help="per harness_noise.py cell, its latest verdicts")
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    files = [load(path) for path in args.files]
    print(targets(files) if args.targets else "\n\n".join(render(found) for found in files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
