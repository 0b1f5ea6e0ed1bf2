"""Which cells the GPU kit runs, in which order, with how many timed steps, what each is expected to cost, and
what each came to already (kit-state.json).

A unit is one repeat of one cell: (stack, compile mode, task, repeat, precision, devices, timed steps). The order
gives the most published ratios per device-second: the short predict cells of BERT and SAM on the uncompiled
variants (native-torch `none`, keras3-jax, keras3-torch), then native-torch's compiled variants of them, then the
fits, then Stable Diffusion, then the LLMs; every cell once before any is repeated, every `published` unit before any
at another precision (bf16 by default), and on a host with several GPUs the data-parallel fits (bert-fit) on all of
them after the first precision's one-device units.

At `paper` a cell whose published timed window would not fit a window's share gets fewer timed steps (the same
for every stack of a task, so the stacks stay comparable): `--steps N` on the command line, `timed_steps` on the
row, a cell identity of its own.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

# (stack, compile mode) in the order each task runs them.
DEFAULT_VARIANTS = (("native-torch", "none"), ("native-torch", "reduce-overhead"), ("keras3-jax", "xla"),
                    ("keras3-torch", "none"))
DEFAULT_TASKS = ("bert-fit", "bert-predict", "sam-fit", "sam-predict", "stable_diffusion-fit",
                 "stable_diffusion-predict", "gemma-fit", "gemma-generate-bs32", "gemma-generate-bs1",
                 "mistral-fit", "mistral-generate-bs32", "mistral-generate-bs1")
DEFAULT_PRECISIONS = ("published", "bf16")
# Cells such a host cannot run, with why: left out of the plan (and listed in its report) rather than
# failing every chunk again.
NOT_ON_THIS_HOST = {
    (stack, task): "KerasCV (the Keras 3 Stable Diffusion) refuses to import without TensorFlow, which the "
                   "image lacks and the wheelhouse cannot carry (hundreds of MB)"
    for stack in ("keras3-jax", "keras3-torch") for task in ("stable_diffusion-fit", "stable_diffusion-predict")
}


class KitError(Exception):
    """A kit failure the user can act on: one `error: ...` line, exit 1."""


@dataclass(frozen=True)
class Unit:
    stack: str
    compile_mode: str
    task: str
    repeat: int
    precision: str = "published"
    devices: int = 1  # fwbench run --devices: data-parallel on this many GPUs
    steps: int | None = None  # fwbench run --steps: a shortened timed window; None: the preset's default
    # A model file's unit (task is then its task id, `<file>.py-<kind>-bs<batch>`): the file's path from the
    # repository, and its SHA-256's first 12 hex digits (an edited file is another cell, as in fwbench).
    model: str | None = None
    model_sha12: str | None = None

    @property
    def key(self) -> str:
        return f"{self.cell_key}/r{self.repeat}"

    @property
    def cell_key(self) -> str:
        # A published one-device unit at the preset's steps keeps the key it had before precisions, devices and
        # steps: an older kit-state.json still resumes.
        at = "" if self.precision == "published" else f"@{self.precision}"
        at += "" if self.devices == 1 else f"@devices-{self.devices}"
        at += "" if self.steps is None else f"@steps-{self.steps}"
        at += "" if self.model is None else f"@file-{self.model_sha12}"
        return f"{self.stack}/{self.compile_mode}/{self.task}{at}"


def parse_variants(text: str | None) -> list[tuple[str, str]]:
    """'native-torch:none,keras3-jax:xla' -> [(stack, mode), ...] (a bare stack takes its default mode)."""
    if not text:
        return list(DEFAULT_VARIANTS)
    defaults = {stack: mode for stack, mode in reversed(DEFAULT_VARIANTS)}
    variants = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        stack, _, mode = item.partition(":")
        if not mode and stack not in defaults:
            raise ValueError(f"variant '{item}': give it as STACK:COMPILE_MODE")
        variants.append((stack, mode or defaults[stack]))
    return variants


def parse_tasks(text: str | None) -> list[str]:
    return [task.strip() for task in text.split(",") if task.strip()] if text else list(DEFAULT_TASKS)


def parse_precisions(text: str | None) -> list[str]:
    """'published,bf16' -> ['published', 'bf16'] (fwbench's --precision values; published first always)."""
    from fwbench.core import precision

    chosen = [part.strip() for part in text.split(",") if part.strip()] if text else list(DEFAULT_PRECISIONS)
    for value in chosen:
        if value not in precision.PRECISIONS:
            raise ValueError(f"unknown precision '{value}' (choose from: {', '.join(precision.PRECISIONS)})")
    return sorted(dict.fromkeys(chosen), key=lambda value: value != "published")


# The fits the kit also runs data-parallel: bert-fit alone. Every fit has a data-parallel variant, but a lent GPU's
# time is short; BERT's fit is the one every data-parallel stack runs, at one batch the paper preset fits on any GPU.
KIT_SCALING_TASKS = ("bert-fit",)


def scaling_tasks(variants: list[tuple[str, str]], tasks: list[str]) -> list[str]:
    """The planned tasks of KIT_SCALING_TASKS that some stack of the plan runs data-parallel (fwbench's registry says
    which)."""
    from fwbench.core import registry

    parallel = [registry.get_stack(stack).data_parallel for stack, _mode in variants]
    return [task for task in tasks
            if task in KIT_SCALING_TASKS and any(p is not None and task in p.tasks for p in parallel)]


def scaling_variants(variants: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each stack once, at its first compile mode in the plan (native-torch: eager `none`; one variant per stack
    keeps the scaling units few). A stack without data parallelism stays in: its unit is a quick `unsupported`
    row that says why, so the scaling rows name every stack of the kit."""
    first: dict[str, str] = {}
    for stack, mode in variants:
        first.setdefault(stack, mode)
    return list(first.items())


def scaling_note(gpus: int, variants: list[tuple[str, str]], tasks: list[str]) -> str:
    """One line for the kit's log: which data-parallel cells this host adds, or why it adds none."""
    fits = scaling_tasks(variants, tasks)
    if not fits:
        return "data-parallel scaling: no planned task has a data-parallel variant (fwbench has them for fits)"
    if gpus < 2:
        return (f"data-parallel scaling: not planned, this host has {gpus} usable GPU{'s' if gpus != 1 else ''} "
                f"(a host with N > 1 GPUs also runs {', '.join(fits)} at --devices N)")
    return (f"data-parallel scaling: {', '.join(fits)} also at --devices {gpus} (every usable GPU of this host) on "
            + ", ".join(f"{stack} [{mode}]" for stack, mode in scaling_variants(variants)))


# -- users' model files (docs/your-model.md) ----------------------------------------------------------------
# The model-file variants, Keras stacks first (the twin's row checks its parameter count against the Keras model's,
# which a Keras cell leaves beside the inputs). Keras 3 on TensorFlow is not on such a host; the twin runs eager.
MODEL_VARIANTS = (("keras3-jax", "xla"), ("keras3-torch", "none"), ("native-torch", "none"))
DEFAULT_MODEL_BATCH = 256
DEFAULT_MODEL_PRECISION = "tf32"
# Between the BERT/SAM predict cells (priority 0 and 1) and the fits (2).
MODEL_PRIORITY = 1.5


def model_path(path: str) -> Path:
    """A --models path: from the repository's root unless absolute (the kit runs from anywhere)."""
    return Path(__file__).resolve().parents[2] / path


def parse_models(text: str | None) -> list[str]:
    """'examples/mlp.py,examples/mobilenet_v2.py' -> the files, each checked to be a model file fwbench can read
    (ValueError: one line)."""
    from fwbench.core import model_file

    files = [part.strip() for part in text.split(",") if part.strip()] if text else []
    for path in files:
        try:
            model_file.read(model_path(path))
        except model_file.ModelFileError as exc:
            raise ValueError(str(exc)) from None
    return files


def model_units(models: list[str], batch: int, precision: str, repeat: int) -> list[Unit]:
    """One repeat of every model file's cells: by kind (fits first), then file, then variant (Keras first); the
    twin only where the file defines one."""
    from fwbench.core import model_file

    units = []
    for kind in model_file.KINDS:
        for path in models:
            read = model_file.read(model_path(path))
            for stack, mode in MODEL_VARIANTS:
                if stack == "native-torch" and not read.has_twin:
                    continue
                units.append(Unit(stack, mode, model_file.task_id(read.name, kind, batch), repeat, precision,
                                  model=path, model_sha12=read.sha256[:12]))
    return units


# -- order ------------------------------------------------------------------------------------------

def priority(task: str, stack: str, compile_mode: str) -> int:
    """Lower runs first: the short predict cells of BERT and SAM on the uncompiled variants give the most published
    ratios per second; native-torch's compiled variants of them next (a compile costs a minute or more), then the
    fits, then Stable Diffusion, then the LLMs (whose random-weight build alone takes a minute)."""
    from fwbench.core import registry

    spec = registry.get_task(task)
    if spec.model in ("bert", "sam"):
        if spec.kind == "predict":
            return 1 if stack == "native-torch" and compile_mode != "none" else 0
        return 2
    return 3 if spec.model == "stable_diffusion" else 4


def plan_units(variants: list[tuple[str, str]], tasks: list[str], repeats: int,
               broken_stacks: dict[str, str] | None = None,
               precisions: list[str] | tuple[str, ...] = ("published",), gpus: int = 1, *,
               steps: dict[str, int | None] | None = None, models: list[str] | None = None,
               model_batch: int = DEFAULT_MODEL_BATCH,
               model_precision: str = DEFAULT_MODEL_PRECISION) -> tuple[list[Unit], list[str]]:
    """Every unit in run order, and a line per cell left out (with the reason). broken_stacks: stack -> why it
    cannot run on this host (its imports fail): its cells are left out, the others run. Within one precision and
    repeat, units go by `priority`, then task, then variant, in the order given; each precision's units come after
    the previous precision's, all repeats included. gpus: the host's usable GPUs; with more than one, the
    data-parallel fits also run on all of them, at the first precision, right after its one-device units.
    steps: task -> its shortened timed steps (`window_steps`), None or absent for the preset's. models: model files
    whose cells (`model_units`, at model_batch and model_precision, the preset's steps) run after the BERT and SAM
    predict cells of each repeat of the first precision."""
    broken_stacks, steps = broken_stacks or {}, steps or {}
    units, left_out = [], []
    for stack, mode in variants:
        if stack in broken_stacks:
            left_out.append(f"{stack} [{mode}], every task: {broken_stacks[stack]}")
    for task in tasks:
        for stack, mode in variants:
            if (stack, task) in NOT_ON_THIS_HOST and stack not in broken_stacks:
                left_out.append(f"{stack} [{mode}] {task}: {NOT_ON_THIS_HOST[(stack, task)]}")

    def runnable_here(stack: str, task: str) -> bool:
        return (stack, task) not in NOT_ON_THIS_HOST and stack not in broken_stacks

    cells = sorted(((task, stack, mode) for task in tasks for stack, mode in variants if runnable_here(stack, task)),
                   key=lambda cell: priority(*cell))  # stable: task, then variant order within a priority
    for index, precision in enumerate(precisions):
        for repeat in range(repeats):
            ordered = [Unit(stack, mode, task, repeat, precision, 1, steps.get(task)) for task, stack, mode in cells]
            if index == 0 and models:
                before = [unit for unit in ordered
                          if priority(unit.task, unit.stack, unit.compile_mode) < MODEL_PRIORITY]
                ordered = before + model_units(models, model_batch, model_precision, repeat) + ordered[len(before):]
            units += ordered
        if index == 0 and gpus > 1:
            for repeat in range(repeats):
                for task in scaling_tasks(variants, tasks):
                    for stack, mode in scaling_variants(variants):
                        if runnable_here(stack, task):
                            units.append(Unit(stack, mode, task, repeat, precision, gpus, steps.get(task)))
    return units, left_out


# -- timed steps and cost estimates ----------------------------------------------------------------------
# Estimates for planning a window, not measurements: the published A100 step times scaled by H100_PER_A100 (an
# H100 runs these cells about 1.5-3x faster than an A100; the smaller speed-up keeps the plan on the safe side),
# plus what a cell process costs before its first timed step. The kit replaces them with a cell's measured wall
# time once it has run (kit-state.json).
H100_PER_A100 = 0.6
# Interpreter, imports, CUDA initialisation and the data check, per stack (keras3-jax: XLA's compile as well).
STARTUP_S = {"native-torch": 15.0, "keras3-jax": 40.0, "keras3-torch": 25.0}
# torch.compile's first step beyond that, per native compile mode.
COMPILE_S = {"none": 0.0, "reduce-overhead": 60.0, "default": 60.0, "max-autotune": 300.0}
# Building the model with random weights, per model at `paper` (7B-parameter LLMs take the longest).
BUILD_S = {"bert": 5.0, "sam": 15.0, "stable_diffusion": 25.0, "gemma": 60.0, "mistral": 90.0}
# Off `paper` (the CPU test's `tiny`): no published times to scale; a step is taken as this long.
OTHER_PRESET_STEP_S = 0.05
# Building a model file's model (and, for its first cell, making its inputs).
MODEL_FILE_BUILD_S = 10.0
MIN_TIMED_STEPS = 5
DEFAULT_TIMED_WINDOW_S = 15.0


@lru_cache(maxsize=None)
def published_step_s(task: str) -> dict[str, float]:
    """(stack/compile) -> the published A100 seconds per step of this task (fwbench's copy of the keras.io table)."""
    from fwbench.core import registry

    spec = registry.get_task(task)
    path = Path(__file__).resolve().parents[2] / "aggregator" / "fwbench_aggregator" / "data" / \
        "keras-io-benchmarks-a100.csv"
    found = {}
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["page_version"] != "v2-2024-04-03" or (row["model"], row["task"]) != (spec.model, spec.kind):
                continue
            if int(row["batch_size"]) == spec.batch["paper"]:
                found[f"{row['stack']}/{row['compile']}"] = float(row["ms_per_step"]) / 1000
    return found


def window_steps(task: str, preset: str, timed_window_s: float) -> int | None:
    """The timed steps a window gives this task: None (the preset's own) off `paper`, or where the preset's steps
    fit `timed_window_s` at the slowest published stack's estimated step; else as many as fit, at least
    MIN_TIMED_STEPS. One number per task, whichever stacks run, so that the stacks of a task stay comparable."""
    from fwbench.core import registry

    default = registry.default_steps(task, preset)
    published = published_step_s(task)
    if preset != "paper" or timed_window_s <= 0 or not published:
        return None
    steps = max(MIN_TIMED_STEPS, math.floor(timed_window_s / (max(published.values()) * H100_PER_A100)))
    return None if steps >= default else steps


def estimate_s(unit: Unit, preset: str) -> float:
    """Seconds one unit is expected to take, from its process start to its row (an estimate: see above)."""
    from fwbench.core import registry

    steps = unit.steps or registry.default_steps(unit.task, preset)
    warmup = registry.get_preset(preset).warmup
    if unit.model is not None:  # a user's model: no published time; small models, a step taken as OTHER_PRESET's
        step_s, build_s = OTHER_PRESET_STEP_S, MODEL_FILE_BUILD_S
    elif preset == "paper":
        published = published_step_s(unit.task)
        step_s = published.get(f"{unit.stack}/{unit.compile_mode}", max(published.values(), default=1.0))
        step_s *= H100_PER_A100
        build_s = BUILD_S.get(registry.get_task(unit.task).model, 30.0)
    else:
        step_s, build_s = OTHER_PRESET_STEP_S, 0.0
    return (STARTUP_S.get(unit.stack, 30.0) + COMPILE_S.get(unit.compile_mode, 0.0) + build_s
            + (warmup + 1 + steps) * step_s)


class KitState:
    """What each unit came to (status, wall seconds of its run, the commit it ran): resuming starts where the last
    window stopped. A unit that ran and failed is not tried again at the same commit (its row says why) unless asked
    (--retry-failed); it is at another commit (a failure seen on a GPU is a bug to fix, and the next window re-checks
    the fix); one cut short by a window's budget (status budget-cut, no row kept) always runs again. A cell's repeat
    r waits for an ok repeat r-1 (repeating a failing cell would only repeat the failure)."""

    def __init__(self, path: Path, commit: str | None = None):
        self.path, self.commit = path, commit
        saved = json.loads(path.read_text()) if path.is_file() else {}
        self.units: dict[str, dict] = saved.get("units", {})
        # GPU check -> its last verdict, detail and when (a later window re-runs only what has not passed).
        self.checks: dict[str, dict] = saved.get("checks", {})

    def status(self, unit: Unit) -> str | None:
        return (self.units.get(unit.key) or {}).get("status")

    def record(self, unit: Unit, status: str, wall_s: float, ms_per_step: float | None) -> None:
        self.units[unit.key] = {"status": status, "wall_s": round(wall_s, 1), "ms_per_step": ms_per_step,
                                "commit": self.commit}

    def known_wall_s(self, unit: Unit) -> float | None:
        """The longest wall time an ok repeat of this cell took (a later repeat should take about as long)."""
        walls = [entry["wall_s"] for key, entry in self.units.items()
                 if key.rsplit("/", 1)[0] == unit.cell_key and entry.get("status") == "ok"]
        return max(walls) if walls else None

    def runnable(self, unit: Unit, retry_failed: bool) -> bool:
        status = self.status(unit)
        if status == "budget-cut":  # the chunk ran out, not the cell: it runs again with its full timeout
            return True
        failed_at = (self.units.get(unit.key) or {}).get("commit")
        if status == "ok" or (status is not None and not retry_failed and failed_at == self.commit):
            return False
        if unit.repeat == 0:
            return True
        # The same cell's previous repeat: every field but the repeat (its devices and steps included).
        return self.status(replace(unit, repeat=unit.repeat - 1)) == "ok"

    def pending(self, units: list[Unit], retry_failed: bool) -> list[Unit]:
        """The units still to run, those a window's budget cut first (they were next when the last one ended)."""
        runnable = [unit for unit in units if self.runnable(unit, retry_failed)]
        return sorted(runnable, key=lambda unit: self.status(unit) != "budget-cut")

    def record_check(self, name: str, verdict: str, detail: str, when: str) -> None:
        self.checks[name] = {"verdict": verdict, "detail": detail, "at": when}

    def passed(self, name: str) -> bool:
        return (self.checks.get(name) or {}).get("verdict") == "PASS"

    def to_json(self) -> str:
        return json.dumps({"units": self.units, "checks": self.checks}, indent=2, sort_keys=True) + "\n"
