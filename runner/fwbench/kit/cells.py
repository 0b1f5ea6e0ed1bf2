"""One unit run through fwbench's own command line, `fwbench run --engine current` (this interpreter and the kit's
libraries), its output appended to kit.log; and its row, found by its cell identity. The window's cells and the GPU
checks' cells both run here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fwbench.core import model_file
from fwbench.kit.install import kit_environment
from fwbench.kit.layout import REPO, KitFolders
from fwbench.kit.plan import model_path
from fwbench.kit.rows import unit_row
from fwbench.kit.unit import PUBLISHED, Unit

# Seconds a unit needs beyond its cell's timeout: the CLI's start, the data check, writing the row.
UNIT_OVERHEAD_S = 20.0


def run_argv(unit: Unit, *, rows: Path, data: Path, timeout_s: float, extra: list[str] | None = None) -> list[str]:
    """`fwbench run` of one repeat of one cell: --repeats r+1 with --resume runs just repeat r when the earlier ones
    have ok rows. A model file's cell: its kind and batch from the task id, the stack's own mode (the twin's eager)."""
    spec = unit.spec
    model_task = model_file.parse_task(spec.task) if unit.model else None
    cell = (["--model", str(model_path(unit.model)), "--task", model_task.kind, "--batch", str(model_task.batch)]
            if model_task else ["--compile", spec.compile_mode, "--task", spec.task])
    return [sys.executable, "-m", "fwbench.cli", "run", "--engine", "current", "--pin-set", spec.pin_set,
            "--stack", spec.stack, *cell, "--preset", spec.preset,
            "--repeats", str(spec.repeat + 1), "--resume", "--timeout", f"{timeout_s:.0f}",
            "--out", str(rows), "--data", str(data), *(["--steps", str(unit.steps)] if unit.steps else []),
            *([] if spec.precision == PUBLISHED else ["--precision", spec.precision]),
            *([] if spec.devices == 1 else ["--devices", str(spec.devices)]),
            *([] if spec.per_step_sync else ["--no-per-step-sync"]), *(extra or [])]


def run_unit(unit: Unit, folders: KitFolders, timeout_s: float, extra: list[str] | None = None, *,
             rows: Path | None = None) -> dict | None:
    """Run the unit (into the window's rows/, or `rows`) and return its newest row (None: none was written)."""
    rows = rows or folders.rows
    argv = run_argv(unit, rows=rows, data=folders.data, timeout_s=timeout_s, extra=extra)
    environment = kit_environment(folders)
    environment.setdefault("FWBENCH_HOME", str(folders.home))
    with open(folders.log, "a") as output:
        output.write(f"\n$ {' '.join(argv)}\n")
        output.flush()
        subprocess.run(argv, env=environment, stdout=output, stderr=subprocess.STDOUT, cwd=REPO)
    return unit_row(rows, unit)
