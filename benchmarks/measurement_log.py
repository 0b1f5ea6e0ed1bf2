"""A harness benchmark's --json file: one run's figures with when, where and from which commit they came.

The shape of every file under benchmarks/results/<date>-<machine>/ that benchmarks/render_measurements.py renders:

    {"benchmark": "harness_noise.py", "command": "python benchmarks/harness_noise.py --runs 20",
     "date": "2026-11-27", "utc": "19:22-20:39", "machine": "AMD EPYC (family 26, model 2), 2 cores",
     "cpu_model": "AMD EPYC (family 26, model 2)", "cores": 2, "commit": "fc7d923",
     "settings": {...}, "target": "...", "figures": [[label, value], ...], "rows": [{...}, ...]}

`figures` holds a run's single numbers ([label, value] or [label, value, format spec]), `rows` its table. A file
transcribed from a log rather than written by its run says so in "source". Where such a file belongs:
`results_folder(record)`; the machine's slug names its CPU generation, since a VM may call two generations by one
name ("AMD EPYC") and run the same cell 3-4x apart on them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
REQUIRED_KEYS = ("benchmark", "command", "date", "machine", "cores", "commit")


def cpu_model() -> str:
    """fwbench's own CPU description (model name with family and model: what rows record), else the platform's."""
    sys.path.insert(0, str(REPO / "runner"))
    try:
        from fwbench.harness.envinfo import cpu_model as described
    except ImportError:  # outside a checkout's interpreter: still say something
        import platform

        return platform.processor() or platform.machine()
    return described()


def commit() -> str | None:
    """This checkout's short commit, or None (no git, or not a checkout)."""
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def command_line(argv: list[str] | None = None) -> str:
    """The command as a user types it from the repository root: `python benchmarks/<script>.py ARGS`."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).resolve()
    shown = str(script.relative_to(REPO)) if script.is_relative_to(REPO) else argv[0]
    return shlex.join(["python", shown, *argv[1:]])


def machine_slug(cpu: str, cores: int | None) -> str:
    """'AMD EPYC (family 26, model 2)', 2 -> 'cpu-amd-epyc-f26m2-2-cores': the folder name's machine part."""
    name, _, numbers = re.sub(r"\((R|TM)\)", "", cpu, flags=re.I).partition("(")
    generation = "".join(f"{label[0]}{value}" for label, value in re.findall(r"(\w+) (\w+)", numbers))
    words = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return "-".join(part for part in ("cpu", words, generation, f"{cores}-cores" if cores else "") if part)


def record(benchmark: str, rows: list[dict], *, started: datetime, ended: datetime | None = None,
           settings: dict | None = None, figures: list | None = None, target: str | None = None,
           argv: list[str] | None = None) -> dict:
    """One run's file: the shape above, this machine and checkout, times in UTC."""
    ended = ended or datetime.now(timezone.utc)
    cpu, cores = cpu_model(), os.cpu_count()
    found = {"benchmark": benchmark, "command": command_line(argv), "date": f"{started:%Y-%m-%d}",
             "utc": f"{started:%H:%M}-{ended:%H:%M}", "machine": f"{cpu}, {cores} cores", "cpu_model": cpu,
             "cores": cores, "commit": commit()}
    if ended.date() != started.date():
        found["utc"] = f"{started:%H:%M}-{ended:%Y-%m-%d %H:%M}"
    for name, value in (("settings", settings), ("target", target), ("figures", figures)):
        if value is not None:
            found[name] = value
    found["rows"] = rows
    return found


def results_folder(found: dict) -> Path:
    """Where a run's file belongs: benchmarks/results/<date>-<machine slug>/."""
    return RESULTS / f"{found['date']}-{machine_slug(found['cpu_model'], found['cores'])}"


def write(path: Path, found: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(found, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {path} (its place: {results_folder(found).relative_to(REPO)}/)", file=sys.stderr)


def now() -> datetime:
    return datetime.now(timezone.utc)


def add_output_options(parser, page: str) -> None:
    """--json PATH (write the run's file) and --render JSON (print a file's Markdown for `page`, run nothing)."""
    parser.add_argument("--json", type=Path, default=None, help="also write the result to this JSON file")
    parser.add_argument("--render", type=Path, default=None, metavar="JSON",
                        help=f"print the Markdown of a result file (for {page}) and exit")


def rendered(args, render) -> bool:
    """With --render: print `render` of that file and say so (the caller returns); else False."""
    if args.render is None:
        return False
    print(render(json.loads(args.render.read_text())))
    return True
