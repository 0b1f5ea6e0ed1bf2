"""Which units the kit runs, in which order and with how many timed steps.

The cells come from fwbench's registry and the published table: every task the table has (the cheapest models
first), on every published (stack, compile mode) the host's image runs (image.KIT_STACKS). The order gives the most
published ratios per device-second: the short predict cells of BERT and SAM on the uncompiled variants
(native-torch `none`, keras3-jax, keras3-torch), then native-torch's compiled variants of them, then the fits, then
Stable Diffusion, then the LLMs; every cell once before any is repeated, every `published` unit before any at another
precision (bf16 by default), and on a host with several GPUs the data-parallel fits (bert-fit) on all of them after
the first precision's one-device units.

At `paper` a cell whose published timed window would not fit a window's share gets fewer timed steps (the same for
every stack of a task, so the stacks stay comparable): `--steps N` on the command line, `timed_steps` on the row, a
cell identity of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from fwbench.core import model_file, precision, registry
from fwbench.core.usage import UsageError
from fwbench.kit.estimates import (BUILD_S, DEFAULT_TIMED_WINDOW_S, FULL_STEPS_BELOW_S, UNKNOWN_BUILD_S,
                                   published_steps, window_steps)
from fwbench.kit.image import KIT_STACKS, NOT_ON_THIS_HOST
from fwbench.kit.layout import REPO
from fwbench.kit.unit import PUBLISHED, Unit

DEFAULT_PRECISIONS = (PUBLISHED, "bf16")
DEFAULT_REPEATS = 3
# The fits the kit also runs data-parallel: bert-fit alone. Every fit has a data-parallel variant, but a lent GPU's
# time is short; BERT's fit is the one every data-parallel stack runs, at one batch the paper preset fits on any GPU.
KIT_SCALING_TASKS = ("bert-fit",)
# Users' model files (docs/your-model.md): the variants, Keras stacks first (the twin's row checks its parameter
# count against the Keras model's, which a Keras cell leaves beside the inputs); the twin runs eager.
MODEL_VARIANTS = (("keras3-jax", "xla"), ("keras3-torch", "none"), ("native-torch", "none"))
DEFAULT_MODEL_BATCH = 256
DEFAULT_MODEL_PRECISION = "tf32"
# Between the BERT/SAM predict cells (priority 0 and 1) and the fits (2).
MODEL_PRIORITY = 1.5


@lru_cache(maxsize=None)
def default_variants() -> tuple[tuple[str, str], ...]:
    """The published (stack, compile mode)s the host's image runs, in the registry's order of stacks and modes:
    native-torch none and reduce-overhead, keras3-jax xla, keras3-torch none."""
    published = {variant for steps in published_steps().values() for variant in steps}
    return tuple((stack.id, mode) for stack in registry.STACKS.values() if stack.id in KIT_STACKS
                 for mode in stack.compile_modes if f"{stack.id}/{mode}" in published)


@lru_cache(maxsize=None)
def default_tasks() -> tuple[str, ...]:
    """Every task of the published table, its model's cheapest first (estimates.BUILD_S), the registry's order
    within a model."""
    order = list(registry.TASKS)
    tasks = [task for task in order if task in published_steps()]
    return tuple(sorted(tasks, key=lambda task: (BUILD_S.get(registry.get_task(task).model, UNKNOWN_BUILD_S),
                                                 order.index(task))))


def parse_variants(text: str | None) -> tuple[tuple[str, str], ...]:
    """'native-torch:none,keras3-jax:xla' -> ((stack, mode), ...) (a bare stack takes its first default mode)."""
    if not text:
        return default_variants()
    defaults = {stack: mode for stack, mode in reversed(default_variants())}
    variants = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        stack, _, mode = item.partition(":")
        if not mode and stack not in defaults:
            raise UsageError(f"variant '{item}': give it as STACK:COMPILE_MODE")
        variants.append((stack, mode or defaults[stack]))
    return tuple(variants)


def parse_tasks(text: str | None) -> tuple[str, ...]:
    return tuple(task.strip() for task in text.split(",") if task.strip()) if text else default_tasks()


def parse_precisions(text: str | None) -> tuple[str, ...]:
    """'published,bf16' -> ('published', 'bf16') (fwbench's --precision values; published first always)."""
    chosen = [part.strip() for part in text.split(",") if part.strip()] if text else list(DEFAULT_PRECISIONS)
    for value in chosen:
        if value not in precision.PRECISIONS:
            raise UsageError(f"unknown precision '{value}' (choose from: {', '.join(precision.PRECISIONS)})")
    return tuple(sorted(dict.fromkeys(chosen), key=lambda value: value != PUBLISHED))


def model_path(path: str) -> Path:
    """A --models path: from the repository's root unless absolute (the kit runs from anywhere)."""
    return REPO / path


def parse_models(text: str | None) -> tuple[str, ...]:
    """'examples/mlp.py,examples/mobilenet_v2.py' -> the files, each checked to be a model file fwbench can read."""
    files = tuple(part.strip() for part in text.split(",") if part.strip()) if text else ()
    for path in files:
        try:
            model_file.read(model_path(path))
        except model_file.ModelFileError as exc:
            raise UsageError(str(exc)) from None
    return files


def check_names(variants, tasks) -> None:
    """Unknown stacks, tasks or compile modes: one error before anything runs (not one failed unit each)."""
    for task in tasks:
        registry.get_task(task)
    for stack, mode in variants:
        registry.check_compile_mode(registry.get_stack(stack), mode)


@dataclass(frozen=True)
class PlanSettings:
    """What a window plans: the cells (tasks x variants, users' model files), repeats, precisions and timed steps."""

    preset: str
    tasks: tuple[str, ...] = field(default_factory=default_tasks)
    variants: tuple[tuple[str, str], ...] = field(default_factory=default_variants)
    repeats: int = DEFAULT_REPEATS
    precisions: tuple[str, ...] = DEFAULT_PRECISIONS
    models: tuple[str, ...] = ()
    model_batch: int = DEFAULT_MODEL_BATCH
    model_precision: str = DEFAULT_MODEL_PRECISION
    timed_window_s: float = DEFAULT_TIMED_WINDOW_S
    steps: int | None = None  # every task's timed steps; None: the window's (window_steps)
    full_steps_below_s: float = FULL_STEPS_BELOW_S  # tasks this fast keep the preset's steps (window_steps)

    def __post_init__(self):
        registry.get_preset(self.preset)
        check_names(self.variants, self.tasks)
        if self.repeats < 1:
            raise UsageError(f"--repeats must be at least 1, got {self.repeats}")

    def steps_by_task(self) -> dict[str, int | None]:
        """task -> its shortened timed steps, None for the preset's."""
        if self.steps:
            return {task: self.steps for task in self.tasks}
        return {task: window_steps(task, self.preset, self.timed_window_s, self.full_steps_below_s)
                for task in self.tasks}


# -- order ------------------------------------------------------------------------------------------

def priority(task: str, stack: str, compile_mode: str) -> int:
    """Lower runs first: the short predict cells of BERT and SAM on the uncompiled variants give the most published
    ratios per second; native-torch's compiled variants of them next (a compile costs a minute or more), then the
    fits, then Stable Diffusion, then the LLMs (whose random-weight build alone takes a minute)."""
    spec = registry.get_task(task)
    if spec.model in ("bert", "sam"):
        if spec.kind == "predict":
            return 1 if registry.get_stack(stack).keras_version is None and compile_mode != "none" else 0
        return 2
    return 3 if spec.model == "stable_diffusion" else 4


# -- data-parallel scaling ----------------------------------------------------------------------------

def scaling_tasks(variants, tasks) -> list[str]:
    """The planned tasks of KIT_SCALING_TASKS that some stack of the plan runs data-parallel (the registry says)."""
    parallel = [registry.get_stack(stack).data_parallel for stack, _mode in variants]
    return [task for task in tasks
            if task in KIT_SCALING_TASKS and any(p is not None and task in p.tasks for p in parallel)]


def scaling_variants(variants) -> list[tuple[str, str]]:
    """Each stack once, at its first compile mode in the plan (native-torch: eager `none`; one variant per stack
    keeps the scaling units few). A stack without data parallelism stays in: its unit is a quick `unsupported`
    row that says why, so the scaling rows name every stack of the kit."""
    first: dict[str, str] = {}
    for stack, mode in variants:
        first.setdefault(stack, mode)
    return list(first.items())


def scaling_note(gpus: int, variants, tasks) -> str:
    """One line for the kit's log: which data-parallel cells this host adds, or why it adds none."""
    fits = scaling_tasks(variants, tasks)
    if not fits:
        return "data-parallel scaling: no planned task has a data-parallel variant (fwbench has them for fits)"
    if gpus < 2:
        return (f"data-parallel scaling: not planned, this host has {gpus} usable GPU{'s' if gpus != 1 else ''} "
                f"(a host with N > 1 GPUs also runs {', '.join(fits)} at --devices N)")
    return (f"data-parallel scaling: {', '.join(fits)} also at --devices {gpus} (every usable GPU of this host) on "
            + ", ".join(f"{stack} [{mode}]" for stack, mode in scaling_variants(variants)))


# -- users' model files -----------------------------------------------------------------------------

def model_units(settings: PlanSettings, repeat: int) -> list[Unit]:
    """One repeat of every model file's cells: by kind (fits first), then file, then variant (Keras first); the
    twin only where the file defines one."""
    units = []
    for kind in model_file.KINDS:
        for path in settings.models:
            read = model_file.read(model_path(path))
            for stack, mode in MODEL_VARIANTS:
                if registry.get_stack(stack).keras_version is None and not read.has_twin:  # the twin's stack
                    continue
                units.append(Unit.of(stack, mode, model_file.task_id(read.name, kind, settings.model_batch), repeat,
                                     preset=settings.preset, precision=settings.model_precision, model=path,
                                     model_sha256=read.sha256))
    return units


# -- the plan ---------------------------------------------------------------------------------------

def left_out(settings: PlanSettings, broken_stacks: dict[str, str]) -> list[str]:
    """A line per cell this host cannot run, with the reason."""
    lines = [f"{stack} [{mode}], every task: {broken_stacks[stack]}" for stack, mode in settings.variants
             if stack in broken_stacks]
    return lines + [f"{stack} [{mode}] {task}: {NOT_ON_THIS_HOST[(stack, task)]}" for task in settings.tasks
                    for stack, mode in settings.variants
                    if (stack, task) in NOT_ON_THIS_HOST and stack not in broken_stacks]


def plan_units(settings: PlanSettings, *, gpus: int = 1,
               broken_stacks: dict[str, str] | None = None) -> tuple[list[Unit], list[str]]:
    """Every unit in run order, and a line per cell left out (with the reason). broken_stacks: stack -> why it
    cannot run on this host (its imports fail): its cells are left out, the others run. Within one precision and
    repeat, units go by `priority`, then task, then variant, in the order given; each precision's units come after
    the previous precision's, all repeats included. gpus: the host's usable GPUs; with more than one, the
    data-parallel fits also run on all of them, at the first precision, right after its one-device units. Model
    files' cells (at their batch and precision, the preset's steps) run after the BERT and SAM predict cells of
    each repeat of the first precision."""
    broken_stacks = broken_stacks or {}
    steps = settings.steps_by_task()

    def runnable_here(stack: str, task: str) -> bool:
        return (stack, task) not in NOT_ON_THIS_HOST and stack not in broken_stacks

    cells = sorted(((task, stack, mode) for task in settings.tasks for stack, mode in settings.variants
                    if runnable_here(stack, task)), key=lambda cell: priority(*cell))  # stable: the order given

    def unit(task: str, stack: str, mode: str, repeat: int, chosen: str, devices: int = 1) -> Unit:
        return Unit.of(stack, mode, task, repeat, preset=settings.preset, precision=chosen, devices=devices,
                       steps=steps.get(task))

    units = []
    for index, chosen in enumerate(settings.precisions):
        for repeat in range(settings.repeats):
            ordered = [unit(task, stack, mode, repeat, chosen) for task, stack, mode in cells]
            if index == 0 and settings.models:
                before = [u for u in ordered if priority(u.task, u.stack, u.compile_mode) < MODEL_PRIORITY]
                ordered = before + model_units(settings, repeat) + ordered[len(before):]
            units += ordered
        if index == 0 and gpus > 1:
            for repeat in range(settings.repeats):
                for task in scaling_tasks(settings.variants, settings.tasks):
                    for stack, mode in scaling_variants(settings.variants):
                        if runnable_here(stack, task):
                            units.append(unit(task, stack, mode, repeat, chosen, gpus))
    return units, left_out(settings, broken_stacks)


# -- the docs' table of timed steps (python -m fwbench.kit.plan) -------------------------------------

def steps_table() -> str:
    """Markdown: per task of the published table, its slowest published step, that step estimated on an H100, the
    timed steps a default window gives it, and the device minutes one repeat of the published-precision plan takes
    by the estimates (docs/gpu-kit.md's generated block)."""
    from fwbench.kit.estimates import H100_PER_A100, estimate_s, slowest_step_s

    settings = PlanSettings("paper", repeats=1, precisions=("published",))
    steps = settings.steps_by_task()
    lines = ["| task | slowest published A100 step s | estimated on an H100 s | timed steps "
             "| their seconds at that step |", "|---|---|---|---|---|"]
    for task in settings.tasks:
        here_s = slowest_step_s(task)
        count = steps[task] or registry.default_steps(task, "paper")
        shortened = "" if steps[task] is None else " (shortened)"
        lines.append(f"| {task} | {here_s / H100_PER_A100:.2f} | {here_s:.2f} | {count}{shortened} | "
                     f"{count * here_s:.0f} |")
    units, _ = plan_units(settings)
    lines += ["", f"One repeat of every cell the kit can run at the published precision: {len(units)} cells, about "
                  f"{sum(estimate_s(unit) for unit in units) / 60:.0f} device minutes by these estimates."]
    return "\n".join(lines)


if __name__ == "__main__":
    print(steps_table())
