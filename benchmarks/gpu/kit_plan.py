"""Which cells the GPU kit runs, in which order, and what it knows of each one already (kit-state.json).

A unit is one repeat of one cell: (stack, compile mode, task, repeat, precision, devices). The order is the
issue's: BERT, SAM, SD, Gemma, Mistral, each task across the variants, every cell once before any is repeated, so
that a run cut short still covers as many cells as it can; and every `published` unit before any at another
precision (bf16 by default: the precision users would train and serve at), which runs when the time allows. On a
host with several GPUs the data-parallel fits (bert-fit) also run on all of them (`--devices N`), after the first
precision's one-device units: the published table comes first, its scaling next, other precisions last.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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

    @property
    def key(self) -> str:
        return f"{self.cell_key}/r{self.repeat}"

    @property
    def cell_key(self) -> str:
        # A published one-device unit keeps the key it had before precisions and devices: an older kit-state.json
        # still resumes.
        at = "" if self.precision == "published" else f"@{self.precision}"
        at += "" if self.devices == 1 else f"@devices-{self.devices}"
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


def plan_units(variants: list[tuple[str, str]], tasks: list[str], repeats: int,
               broken_stacks: dict[str, str] | None = None,
               precisions: list[str] | tuple[str, ...] = ("published",), gpus: int = 1
               ) -> tuple[list[Unit], list[str]]:
    """Every unit in run order, and a line per cell left out (with the reason). broken_stacks: stack -> why it
    cannot run on this host (its imports fail): its cells are left out, the others run. Each precision's units
    come after the previous precision's, all repeats included. gpus: the host's usable GPUs; with more than one,
    the data-parallel fits also run on all of them, at the first precision, right after its one-device units."""
    broken_stacks = broken_stacks or {}
    units, left_out = [], []
    for stack, mode in variants:
        if stack in broken_stacks:
            left_out.append(f"{stack} [{mode}], every task: {broken_stacks[stack]}")
    for task in tasks:
        for stack, mode in variants:
            if (stack, task) in NOT_ON_THIS_HOST and stack not in broken_stacks:
                left_out.append(f"{stack} [{mode}] {task}: {NOT_ON_THIS_HOST[(stack, task)]}")
    for index, precision in enumerate(precisions):
        for repeat in range(repeats):
            for task in tasks:
                for stack, mode in variants:
                    if (stack, task) not in NOT_ON_THIS_HOST and stack not in broken_stacks:
                        units.append(Unit(stack, mode, task, repeat, precision))
        if index == 0 and gpus > 1:
            for repeat in range(repeats):
                for task in scaling_tasks(variants, tasks):
                    for stack, mode in scaling_variants(variants):
                        if (stack, task) not in NOT_ON_THIS_HOST and stack not in broken_stacks:
                            units.append(Unit(stack, mode, task, repeat, precision, gpus))
    return units, left_out


class KitState:
    """What each unit came to (status, wall seconds of its run): resuming starts where the last chunk stopped.
    A unit that ran and failed is not tried again (its row says why) unless asked (--retry-failed), except
    one cut short by the chunk's budget (status budget-cut, no row kept); a
    cell's repeat r waits for an ok repeat r-1 (repeating a failing cell would only repeat the failure)."""

    def __init__(self, path: Path):
        self.path = path
        self.units: dict[str, dict] = json.loads(path.read_text()).get("units", {}) if path.is_file() else {}

    def status(self, unit: Unit) -> str | None:
        return (self.units.get(unit.key) or {}).get("status")

    def record(self, unit: Unit, status: str, wall_s: float, ms_per_step: float | None) -> None:
        self.units[unit.key] = {"status": status, "wall_s": round(wall_s, 1), "ms_per_step": ms_per_step}

    def known_wall_s(self, unit: Unit) -> float | None:
        """The longest wall time an ok repeat of this cell took (a later repeat should take about as long)."""
        walls = [entry["wall_s"] for key, entry in self.units.items()
                 if key.rsplit("/", 1)[0] == unit.cell_key and entry.get("status") == "ok"]
        return max(walls) if walls else None

    def runnable(self, unit: Unit, retry_failed: bool) -> bool:
        status = self.status(unit)
        if status == "budget-cut":  # the chunk ran out, not the cell: it runs again with its full timeout
            return True
        if status == "ok" or (status is not None and not retry_failed):
            return False
        if unit.repeat == 0:
            return True
        previous = Unit(unit.stack, unit.compile_mode, unit.task, unit.repeat - 1, unit.precision)
        return self.status(previous) == "ok"

    def to_json(self) -> str:
        return json.dumps({"units": self.units}, indent=2, sort_keys=True) + "\n"
