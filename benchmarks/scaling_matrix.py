"""Which stack can run which fit data-parallel: every stack x fit task at `--devices 1` and `--devices N` (default
2) at the tiny preset on this machine, into one results folder (the device count is part of the cell identity),
then a dated table of statuses: ok (with the collectives), or unsupported / error with the reason.

    PYTHONPATH=runner:aggregator python benchmarks/scaling_matrix.py --out /tmp/scaling-matrix \\
        [--devices 2] [--stack native-torch] [--task bert-fit] [--jit off] [--table-only] [--json FILE]

On a CPU the N devices are N processes or N forced host devices sharing the cell's cores: the rows prove that
each stack's data parallelism runs (tests/test_scaling_equivalence.py proves it computes the right update), and
make no speed claim. `--jit off`: the TensorFlow stacks' MirroredStrategy cannot compile the replicated step with
XLA on CPU devices (an `unsupported` row says so at the published setting). `--json FILE` also writes the statuses
as a measurement log (benchmarks/measurement_log.py's shape: one row per cell with its task, device count, stack,
status, collectives or reason); `python benchmarks/render_matrices.py FILE` renders it as the docs show it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
from pathlib import Path

import measurement_log
from fwbench.core import registry, results

FIT_TASKS = [task_id for task_id, task in registry.TASKS.items() if task.kind == "fit"]


def run(stack: str, devices: int, out: Path, tasks: list[str], extra: list[str]) -> int:
    # --resume: an interrupted matrix goes on where it stopped (ok rows are kept; other statuses run again).
    command = [sys.executable, "-m", "fwbench.cli", "run", "--stack", stack, "--preset", "tiny", "--devices",
               str(devices), "--out", str(out), "--resume", *extra, *(arg for task in tasks for arg in ("--task", task))]
    with open(out / f"{stack}.devices-{devices}.log", "w") as log:
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode


def cell_text(row: dict | None) -> str:
    if row is None:
        return "—"
    if row["status"] == "ok":
        return f"ok ({row.get('comm_backend') or 'one device'})"  # CPU devices: no speed claim, no figure
    reason = " ".join((row.get("error_message") or "").split())[:110].replace("|", "/")
    return f"{row['status']}: {reason}"


def read_rows(out: Path) -> dict[tuple[str, str, int], dict]:
    return {(r["stack"], r["task"], int(r.get("devices") or 1)): r
            for r in (results.read_row(p) for p in sorted(out.rglob("*.parquet"))) if r}


def log_rows(out: Path, stacks: list[str], tasks: list[str], counts: list[int]) -> list[dict]:
    """The measurement log's rows: one per cell that has a row, in the table's order."""
    rows, found = read_rows(out), []
    for task in tasks:
        for count in counts:
            for stack in stacks:
                row = rows.get((stack, task, count))
                if row is None:
                    continue
                entry = {"task": task, "devices": count, "stack": stack, "status": row["status"]}
                if row["status"] == "ok":
                    if row.get("comm_backend"):
                        entry["comm_backend"] = row["comm_backend"]
                else:
                    entry["reason"] = " ".join((row.get("error_message") or "").split())[:110].replace("|", "/")
                found.append(entry)
    return found


def table(out: Path, stacks: list[str], tasks: list[str], counts: list[int], *, machine: str, date: str) -> str:
    rows = read_rows(out)
    lines = [f"Data-parallel matrix, tiny preset, {machine}, {date} (`benchmarks/scaling_matrix.py`; CPU devices: "
             "correctness, no speed claim).", "", "| task | devices | " + " | ".join(stacks) + " |",
             "|---|---|" + "---|" * len(stacks)]
    for task in tasks:
        for count in counts:
            lines.append(f"| {task} | {count} | "
                         + " | ".join(cell_text(rows.get((stack, task, count))) for stack in stacks) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--devices", type=int, default=2, help="the device count beside 1 (default 2)")
    parser.add_argument("--stack", action="append", choices=registry.REPORT_ORDER)
    parser.add_argument("--task", action="append", choices=FIT_TASKS)
    parser.add_argument("--jit", choices=("published", "off"), default="published")
    parser.add_argument("--machine", default="2-core development machine")
    parser.add_argument("--date", default=dt.date.today().isoformat())
    parser.add_argument("--table-only", action="store_true", help="Only print the table of what --out holds.")
    parser.add_argument("--json", type=Path, metavar="FILE",
                        help="Also write the statuses to FILE (benchmarks/measurement_log.py's shape).")
    args = parser.parse_args()
    started = measurement_log.now()
    if args.devices < 2:
        parser.error("--devices must be at least 2 (1 is always run beside it)")
    stacks, tasks, counts = args.stack or list(registry.REPORT_ORDER), args.task or FIT_TASKS, [1, args.devices]
    extra = ["--jit", args.jit] if args.jit != "published" else []
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        for stack in stacks:
            for count in counts:
                code = run(stack, count, args.out, tasks, extra)
                print(f"{stack} --devices {count}: exit {code}", file=sys.stderr, flush=True)
    print(table(args.out, stacks, tasks, counts, machine=args.machine, date=args.date))
    if args.json:
        settings = {"preset": "tiny", "devices": counts, "jit": args.jit, "stacks": stacks, "tasks": tasks}
        measurement_log.write(args.json, measurement_log.record(
            "scaling_matrix.py", log_rows(args.out, stacks, tasks, counts), started=started, settings=settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
