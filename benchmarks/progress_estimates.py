"""How far `fwbench run`'s progress estimates (fwbench.cli.progress) are off on a real run.

    python benchmarks/progress_estimates.py --json benchmarks/results/DATE-MACHINE/progress-estimates.json
    python benchmarks/progress_estimates.py --render FILE.json    # the Markdown docs/running.md shows

Runs one small matrix twice with the local engine (default: native-torch, bert-predict and bert-fit, tiny, 2
repeats), both times with `--history STORE` on a new, empty store: run A finds no history (every estimate is the
registry's), run B finds run A's rows. For every cell of run B it records the estimate the run made before the cell
started (from the store as it was before run B: the history median of run A's rows of the same cell identity, and the
registry's estimate beside it) and the cell's actual wall time (its row's extra.process_s), and the error of each in
percent of run B's total cell time. It also reads run B's progress lines (`[N/M] ... about H:MM:SS left`) as they came
and compares each "left" with the time the run then really took to finish.

The machine may be shared with other work: timings are not quiet ones. What is measured is the estimate's error, not
speed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "runner"), str(REPO / "aggregator"), str(REPO / "benchmarks")]

import measurement_log  # noqa: E402

LINE = re.compile(r"^\[(\d+)/(\d+)\] (\d+):(\d\d):(\d\d) elapsed, "
                  r"(?:about (\d+):(\d\d):(\d\d) left|all \d+ cells done)")
NOTE = ("The machine (2 cores) was shared with other work while this ran: the timings are not quiet ones. What is "
        "measured is the estimate's error, not speed.")


def seconds(h: str, m: str, s: str) -> int:
    return int(h) * 3600 + int(m) * 60 + int(s)


def run_matrix(args, out: Path, store: Path, data: Path) -> tuple[list[tuple[float, str]], float]:
    """`fwbench run` into `out` (not on a terminal): its stdout lines, each with when it was read, and the run's
    wall time."""
    command = [sys.executable, "-m", "fwbench.cli", "run", "--preset", args.preset, "--repeats", str(args.repeats),
               "--out", str(out), "--history", str(store), "--data", str(data), "--engine", "local"]
    for stack in args.stack:
        command += ["--stack", stack]
    for task in args.task:
        command += ["--task", task]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "runner"), str(REPO / "aggregator")])}
    env.pop("FWBENCH_HISTORY", None)
    print("$ " + " ".join(command[1:]), flush=True)
    lines = []
    began = time.monotonic()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                          cwd=REPO) as process:
        for line in process.stdout:
            lines.append((time.monotonic() - began, line.rstrip("\n")))
            print("  " + line.rstrip("\n"), flush=True)
    if process.returncode not in (0, 1):
        raise SystemExit(f"fwbench run failed (exit {process.returncode})")
    return lines, time.monotonic() - began


def measure(args) -> dict:
    from fwbench.cli import progress
    from fwbench.core import results
    from fwbench.core.identity import CellIdentity
    from fwbench.kit.unit import Unit
    from fwbench_aggregator.stats import median

    work = args.work
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    store, data = work / "store", work / "data"
    run_matrix(args, work / "a", store, data)
    before_b = progress.history_walls(store)  # what run B reads before its first cell
    lines, wall_b = run_matrix(args, work / "b", store, data)
    rows = [row for path in sorted((work / "b").rglob("*.parquet")) if (row := results.read_row(path))]
    rows.sort(key=lambda row: str(row.get("started_at")))
    total = sum(progress.row_wall_s(row) or 0.0 for row in rows)
    cells = []
    for row in rows:
        identity = CellIdentity.of_row(row)
        known = before_b.get(identity)
        actual = progress.row_wall_s(row)
        registry = progress.registry_estimate(
            Unit.of(row["stack"], row["compile_mode"], row["task"], int(row["repeat"]), preset=row["preset"]).spec)
        history = median(known) if known else None
        estimate = history if history is not None else registry
        cells.append({"cell": f"{row['stack']} {row['task']} [{row['compile_mode']}]", "repeat": int(row["repeat"]),
                      "status": row["status"], "source": "history" if history is not None else "registry",
                      "history_rows": len(known or []), "estimate_s": round(estimate, 2),
                      "registry_s": round(registry, 2), "actual_s": round(actual, 2),
                      "error_pct_of_total": round(100 * abs(estimate - actual) / total, 2),
                      "registry_error_pct_of_total": round(100 * abs(registry - actual) / total, 2),
                      "error_pct_of_cell": round(100 * abs(estimate - actual) / actual, 1)})
    # Run B's own progress lines: each "about X left" against what the run then took to its last cell.
    said = []
    for at, text in lines:
        match = LINE.match(text)
        if match:
            said.append((int(match[1]), int(match[2]), at, None if match[6] is None else seconds(*match.group(6, 7, 8)),
                         text))
    end = said[-1][2] if said else wall_b
    left_rows = []
    for n, m, at, left, text in said:
        if n < m and left is not None:
            really = end - at
            left_rows.append({"after": f"{n}/{m}", "said_left_s": left, "really_left_s": round(really, 1),
                              "error_pct_of_total": round(100 * abs(left - really) / total, 1),
                              "how": text.split(" left (", 1)[-1].rstrip(")")})
    errors = [cell["error_pct_of_total"] for cell in cells]
    registry_errors = [cell["registry_error_pct_of_total"] for cell in cells]
    left_errors = [row["error_pct_of_total"] for row in left_rows]
    figures = [["cells in run B", len(cells)], ["run B's total cell time, s", round(total, 1), ".1f"],
               ["history estimate: median absolute error, % of total", statistics.median(errors), ".1f"],
               ["history estimate: worst absolute error, % of total", max(errors), ".1f"],
               ["registry estimate: median absolute error, % of total", statistics.median(registry_errors), ".1f"],
               ["registry estimate: worst absolute error, % of total", max(registry_errors), ".1f"]]
    if left_errors:
        figures += [["'left' figure: median absolute error, % of total", statistics.median(left_errors), ".1f"],
                    ["'left' figure: worst absolute error, % of total", max(left_errors), ".1f"]]
    return {"cells": cells, "left": left_rows, "figures": figures, "total_s": round(total, 2)}


def render(record: dict) -> str:
    """The Markdown of a result file: provenance, the per-cell table, the 'left' table, the summary figures."""
    settings = record["settings"]
    lines = [f"Measured {record['date']} {record.get('utc', '')} UTC on {record['machine']}, commit "
             f"{record['commit'] or 'unknown'}: `{record['command']}` ({', '.join(settings['stack'])}; "
             f"{', '.join(settings['task'])}; preset {settings['preset']}; {settings['repeats']} repeats; run B "
             f"after run A into the same store). {record['note']}", "",
             "| cell | repeat | estimate from | estimate s | registry's s | actual s | error, % of total |",
             "|---|---|---|---|---|---|---|"]
    for cell in record["rows"]:
        lines.append(f"| {cell['cell']} | {cell['repeat']} | {cell['source']} ({cell['history_rows']} rows) | "
                     f"{cell['estimate_s']:.1f} | {cell['registry_s']:.1f} | {cell['actual_s']:.1f} | "
                     f"{cell['error_pct_of_total']:.1f} |")
    if record.get("left"):
        lines += ["", "| after cell | said left s | really left s | error, % of total |", "|---|---|---|---|"]
        for row in record["left"]:
            lines.append(f"| {row['after']} | {row['said_left_s']} | {row['really_left_s']:.1f} | "
                         f"{row['error_pct_of_total']:.1f} |")
    lines += ["", "| figure | value |", "|---|---|"]
    for label, value, *spec in record["figures"]:
        lines.append(f"| {label} | {format(value, spec[0]) if spec else value} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", action="append", default=None)
    parser.add_argument("--task", action="append", default=None)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("/tmp/fwbench-progress-estimates"),
                        help="folder of both runs' results, their store and data (emptied first)")
    measurement_log.add_output_options(parser, "docs/running.md")
    args = parser.parse_args(argv)
    if measurement_log.rendered(args, render):
        return 0
    args.stack = args.stack or ["native-torch"]
    args.task = args.task or ["bert-predict", "bert-fit"]
    started = measurement_log.now()
    found = measure(args)
    for label, value, *spec in found["figures"]:
        print(f"{label}: {format(value, spec[0]) if spec else value}")
    if args.json is not None:
        record = measurement_log.record(
            "progress_estimates.py", found["cells"], started=started,
            settings={"stack": args.stack, "task": args.task, "preset": args.preset, "repeats": args.repeats},
            figures=found["figures"], argv=sys.argv if argv is None else [sys.argv[0], *argv],
            target="the estimate's error in percent of the run's total cell time (not speed)")
        record["left"] = found["left"]
        record["note"] = NOTE
        measurement_log.write(args.json, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
