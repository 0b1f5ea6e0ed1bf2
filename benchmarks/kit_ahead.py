"""What starting the next units ahead (fwbench kit window --prefetch N) saves a window, measured in the simulated
GPU host image on this CPU: the same plan run twice in fresh folders, once with --prefetch 0 (each unit at its turn)
and once with --prefetch N, then each window's units' span, median overhead per unit and timed fraction.

    python benchmarks/kit_ahead.py [--prefetch 3] --out benchmarks/results/<date>-<machine>/kit-ahead
    python benchmarks/kit_ahead.py --print benchmarks/results/<date>-<machine>/kit-ahead   # the table, from files

Needs the simulated image that tests/test_gpu_kit.py builds (its venv under $FWBENCH_HOME/venvs, found by name) and
makes its own wheelhouse for that image's Python (`fwbench kit prepare`, from PyPI). Each run's kit-state.json,
kit.log and host.json are kept under --out (prefetch-0/, prefetch-N/) with a measurement.json; --print renders
the table from those files (docs/gpu-kit.md's generated block). Time it on a quiet machine: the cells are real
framework processes on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "runner"), str(REPO / "aggregator")]

from fwbench.harness.envinfo import cpu_model  # noqa: E402
from fwbench.kit import breakdown  # noqa: E402

PLAN = ["--preset", "tiny", "--repeats", "2", "--tasks", "bert-predict", "--variants",
        "native-torch:none,keras3-jax,keras3-torch",
        "--precisions", "published"]
WINDOW = ["--budget-s", "900", "--cell-timeout", "300", "--restore", "none", "--skip-checks"]
KEPT = ("kit-state.json", "kit.log", "host.json")


def image_python() -> Path:
    home = Path(os.environ.get("FWBENCH_HOME", Path.home() / ".cache" / "fwbench"))
    found = sorted((home / "venvs").glob("gpu-kit-sim-image-py*"))
    ready = [venv for venv in found if (venv / ".fwbench-ready").is_file()]
    if not ready:
        sys.exit("error: no simulated image: run `pytest tests/test_gpu_kit.py -m integration -k simulated` once")
    return ready[-1] / "bin" / "python"


def kit(python: Path, *args: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYTHONPATH="runner:aggregator")
    return subprocess.run([str(python), "-m", "fwbench.cli", "kit", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=1800)


def summary(state_path: Path) -> dict:
    state = json.loads(state_path.read_text())
    entries = list(state["units"].values())
    overheads = [found for found in map(breakdown.overhead_s, entries) if found is not None]
    window_s = state["windows"][-1]["wall_s"]
    timed_s = sum((entry.get("breakdown") or {}).get("timed_s") or 0.0 for entry in entries)
    return {"units": len(entries), "ok": sum(entry["status"] == "ok" for entry in entries),
            "median_overhead_s": round(statistics.median(overheads), 1) if overheads else None,
            "ahead_s": round(sum(entry.get("ahead_s") or 0.0 for entry in entries), 1),
            "window_s": window_s, "timed_fraction": breakdown.timed_fraction(timed_s, window_s)}


def table(folder: Path) -> list[str]:
    """The measured windows of `folder` (prefetch-N/ each), from their kit-state.json and measurement.json."""
    runs = sorted(folder.glob("prefetch-*"), key=lambda path: int(path.name.split("-")[1]))
    if not runs:
        sys.exit(f"error: no prefetch-N folders in {folder}")
    measured = json.loads((runs[0] / "measurement.json").read_text())
    lines = [f"Measured {measured['date']} on {measured['machine']} ({measured['source']}); the plan: "
             f"`{' '.join(PLAN)}`.", "",
             "| --prefetch | units ok | window s | median overhead per unit s | seconds ahead | timed fraction |",
             "|---|---|---|---|---|---|"]
    for run in runs:
        figures = summary(run / "kit-state.json")
        lines.append(f"| {run.name.split('-')[1]} | {figures['ok']} of {figures['units']} | {figures['window_s']:.0f} | "
                     f"{figures['median_overhead_s']} | {figures['ahead_s']} | {figures['timed_fraction']} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefetch", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--print", type=Path, dest="print_folder")
    args = parser.parse_args()
    if args.print_folder:
        print("\n".join(table(args.print_folder)))
        return 0
    if args.out is None:
        sys.exit("error: --out FOLDER (to measure) or --print FOLDER (to render what was measured)")
    python = image_python()
    version = subprocess.run([str(python), "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
                             capture_output=True, text=True, check=True).stdout.strip()
    found = {}
    with tempfile.TemporaryDirectory(prefix="kit-ahead-") as scratch:
        kit_dir = Path(scratch) / "kit"
        made = kit(python, "prepare", "--kit-dir", str(kit_dir), "--python-version", version)
        if made.returncode:
            sys.exit(f"error: kit prepare failed: {made.stderr.strip()[-400:]}")
        for prefetch in (0, args.prefetch):
            out = Path(scratch) / f"prefetch-{prefetch}"
            began = datetime.now(timezone.utc)
            ran = kit(python, "window", "--kit-dir", str(kit_dir), *PLAN, *WINDOW, "--prefetch", str(prefetch),
                      "--out", str(out))
            if ran.returncode:
                sys.exit(f"error: the --prefetch {prefetch} window failed: {ran.stdout.strip()[-600:]}")
            kept = args.out / f"prefetch-{prefetch}"
            shutil.rmtree(kept, ignore_errors=True)
            kept.mkdir(parents=True)
            for name in KEPT:
                shutil.copy2(out / name, kept / name)
            found[prefetch] = summary(kept / "kit-state.json")
            (kept / "measurement.json").write_text(json.dumps({
                "benchmark": "benchmarks/kit_ahead.py", "date": began.date().isoformat(),
                "utc": f"{began:%H:%M}-{datetime.now(timezone.utc):%H:%M}",
                "machine": f"{cpu_model()}, {os.cpu_count()} cores",
                "command": f"python benchmarks/kit_ahead.py --prefetch {args.prefetch} --out {args.out}",
                "window": ["kit", "window", *PLAN, *WINDOW, "--prefetch", str(prefetch)],
                "source": "the simulated GPU host image on this CPU, no GPU: real framework cells at tiny",
                "summary": found[prefetch]}, indent=1) + "\n")
    print("\n".join(table(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
