"""docs/your-model.md's real run: the Transformer example (examples/transformer_classifier.py) on every backend of
this machine, kept as rows, and its Markdown made from those rows by the report's own "Your models" section.

    python benchmarks/your_model_example.py --out DIR [--steps 20 --repeats 3 --threads 1]   # run, keep DIR/rows
    python benchmarks/your_model_example.py --render DIR                                      # print the Markdown

The run is `fwbench run --model ...` as a user types it, its rows under DIR/rows and the run's facts (when, where,
the commit, its wall time) in DIR/run.json. --render reads them and measures nothing: its tables and verdicts are
the aggregator's (fwbench's judge) on those rows today, so a change of the judge shows in the page
(benchmarks/docblocks.py --check). Run it on a quiet machine: busy rows rank nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import measurement_log
from render_measurements import figure_table, heading

REPO = Path(__file__).resolve().parents[1]
MODEL = "examples/transformer_classifier.py"


def run(out: Path, steps: int, repeats: int, threads: int) -> dict:
    """Run the example's cells into OUT/rows and write OUT/run.json."""
    rows = out / "rows"
    argv = ["fwbench", "run", "--model", MODEL, "--steps", str(steps), "--repeats", str(repeats), "--threads",
            str(threads), "--out", str(rows)]
    started = measurement_log.now()
    done = subprocess.run([sys.executable, "-m", "fwbench.cli", *argv[1:]], cwd=REPO)
    ended = measurement_log.now()
    found = measurement_log.record("fwbench run --model", [], started=started, ended=ended,
                                   settings={"steps": steps, "repeats": repeats, "threads": threads},
                                   figures=[["the cells, wall time", f"{(ended - started).total_seconds():.0f} s"]])
    found["command"] = " ".join(argv[:-1] + ["rows"])
    found["command_note"] = "each cell its own process, one after another"
    found["exit"] = done.returncode
    measurement_log.write(out / "run.json", found)
    return found


def render(folder: Path) -> str:
    """The page's block: the run's heading and figures, then the report's "Your models" tables from the rows."""
    sys.path.insert(0, str(REPO / "aggregator"))
    sys.path.insert(0, str(REPO / "runner"))
    from fwbench_aggregator import judge, loading, model_files
    from fwbench_aggregator.document import Document, to_markdown

    found = json.loads((folder / "run.json").read_text())
    frame = loading.load_results([folder / "rows"]).frame()
    ok = frame[frame["status"] == "ok"]
    _quiet, busy = judge.quiet(frame)
    figures = [["rows", len(frame)], ["ok rows", len(ok)],
               ["busy rows (something competed with the cell while it was timed: they rank nothing)", busy],
               *found.get("figures", [])]
    for kind in ("fit", "predict"):
        flops = ok[ok["task"].str.contains(f"-{kind}-", regex=False)]["model_flops_per_step"].dropna()
        if len(flops):
            figures.append([f"FLOPs per {kind} step (counted alike on every backend)",
                            f"{float(flops.median()) / 1e9:.3g} GFLOP"])
    section = to_markdown(Document("", model_files.blocks(frame)), folder).splitlines()
    body = []
    for line in section[2:]:  # after the document's own title; the section's heading is the page's
        if line.startswith("## Your models") or (not line and (not body or not body[-1])):
            continue
        body.append("#" + line if line.startswith("### ") else line)
    return "\n".join([heading(found), "", *figure_table(figures), "", *body]).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="run the example, keeping its rows and facts in this folder")
    parser.add_argument("--render", type=Path, metavar="DIR", help="print the Markdown of a kept run and exit")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.render is not None:
        print(render(args.render), end="")
        return 0
    if args.out is None:
        parser.error("give --out DIR (run) or --render DIR")
    return run(args.out, args.steps, args.repeats, args.threads)["exit"]


if __name__ == "__main__":
    sys.exit(main())
