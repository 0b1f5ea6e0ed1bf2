"""Which precision each stack can run for each task: every stack x task x --precision at the tiny preset on this
machine, one `fwbench run` per (stack, precision) into a results folder per precision (precision is part of the
cell identity, so they could share one; apart, each precision's table reads one folder), then a dated table of
statuses: ok, diverged, unsupported (with its reason) or error.

    PYTHONPATH=runner:aggregator python benchmarks/precision_matrix.py --out /tmp/precision-matrix \\
        [--precision bf16 --precision fp16] [--stack native-torch] [--task bert-fit] [--table-only] [--json FILE]

Slow on a CPU (every cell is a process: about 10-30 s each, 300 cells for the whole matrix). The table is
Markdown, for docs/workloads.md#precision. `--json FILE` also writes the statuses as a measurement log
(benchmarks/measurement_log.py's shape: one row per cell with its precision, task, stack, status, compute dtype or
reason); `python benchmarks/render_matrices.py FILE` renders it as the docs show it.
"""

from __future__ import annotations

import argparse
import re
import datetime as dt
import subprocess
import sys
from pathlib import Path

import measurement_log
from fwbench.core import precision, registry, results


def run(stack: str, value: str, out: Path, threads: int, tasks: list[str]) -> int:
    folder = out / f"{value}"
    # --resume: an interrupted matrix goes on where it stopped (ok rows are kept; other statuses run again).
    command = [sys.executable, "-m", "fwbench.cli", "run", "--stack", stack, "--preset", "tiny", "--threads",
               str(threads), "--precision", value, "--out", str(folder), "--resume",
               *(arg for task in tasks for arg in ("--task", task))]
    with open(out / f"{stack}.{value}.log", "w") as log:
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode


def cell_text(row: dict | None) -> str:
    if row is None:
        return "—"
    status = row["status"]
    if status == "ok":
        return f"ok ({row.get('compute_dtype') or '?'})"
    if status == "diverged":
        return f"diverged ({row.get('nonfinite_losses')} non-finite)"
    return f"{status}: {reason_text(row.get('error_message') or '')}"


def reason_text(message: str) -> str:
    """The reason in a table cell: for a library's own dtype failure, where it failed and the line that says what."""
    from fwbench.harness.cell import DTYPE_MARKERS  # plain Python: no framework import

    message = re.sub(r"\x1b\[[0-9;]*m", "", message)
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    said = next((line for line in lines if any(marker in line.lower() for marker in DTYPE_MARKERS)), None)
    where = re.search(r"calling (?:layer \"?)?([A-Za-z_]+)", message)
    if said and where:
        return f"{where.group(1)}: {said}"[:160].replace("|", "/")
    return " ".join(message.split())[:160].replace("|", "/")


def read_rows(folder: Path) -> dict[tuple[str, str], dict]:
    return {(r["stack"], r["task"]): r for r in (results.read_row(p) for p in sorted(folder.rglob("*.parquet"))) if r}


def log_rows(out: Path, stacks: list[str], values: list[str], tasks: list[str]) -> list[dict]:
    """The measurement log's rows: one per cell that has a row, in the table's order."""
    found = []
    for value in values:
        rows = read_rows(out / value)
        for task in tasks:
            for stack in stacks:
                row = rows.get((stack, task))
                if row is None:
                    continue
                entry = {"precision": value, "task": task, "stack": stack, "status": row["status"]}
                if row["status"] == "ok":
                    entry["compute_dtype"] = row.get("compute_dtype") or "?"
                elif row["status"] == "diverged":
                    entry["nonfinite_losses"] = row.get("nonfinite_losses")
                else:
                    entry["reason"] = reason_text(row.get("error_message") or "")
                for key in ("loss_scale", "loss_scale_skipped_steps"):
                    if row.get(key) is not None:
                        entry[key] = row[key]
                found.append(entry)
    return found


def table(out: Path, stacks: list[str], values: list[str], tasks: list[str], machine: str, *, date: str) -> str:
    lines = [f"Precision matrix, tiny preset, {machine}, {date} (`benchmarks/precision_matrix.py`; ok rows show the "
             "compute dtype inspected from what ran).", ""]
    for value in values:
        rows = read_rows(out / value)
        lines += [f"`--precision {value}`", "", "| task | " + " | ".join(stacks) + " |",
                  "|---|" + "---|" * len(stacks)]
        for task in tasks:
            lines.append(f"| {task} | " + " | ".join(cell_text(rows.get((stack, task))) for stack in stacks) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stack", action="append", choices=registry.REPORT_ORDER)
    parser.add_argument("--precision", action="append", choices=precision.PRECISIONS)
    parser.add_argument("--task", action="append", choices=list(registry.TASKS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--machine", default="2-core development machine")
    parser.add_argument("--date", default=dt.date.today().isoformat())
    parser.add_argument("--table-only", action="store_true", help="Only print the table of what --out holds.")
    parser.add_argument("--json", type=Path, metavar="FILE",
                        help="Also write the statuses to FILE (benchmarks/measurement_log.py's shape).")
    args = parser.parse_args()
    started = measurement_log.now()
    stacks = args.stack or list(registry.REPORT_ORDER)
    values = args.precision or list(precision.PRECISIONS)
    tasks = args.task or list(registry.TASKS)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        for stack in stacks:  # a stack's column is complete before the next stack starts
            for value in values:
                code = run(stack, value, args.out, args.threads, tasks)
                print(f"{stack} --precision {value}: exit {code}", file=sys.stderr, flush=True)
    print(table(args.out, stacks, values, tasks, args.machine, date=args.date))
    if args.json:
        settings = {"preset": "tiny", "threads": args.threads, "precisions": values, "stacks": stacks, "tasks": tasks}
        measurement_log.write(args.json, measurement_log.record(
            "precision_matrix.py", log_rows(args.out, stacks, values, tasks), started=started, settings=settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
