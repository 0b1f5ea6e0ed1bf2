"""A unit of the kit: one repeat of one cell, as a cell spec (fwbench.core.spec.CellSpec), so that its rows are
found by the cell identity fwbench gives them and its key in kit-state.json is made from that identity.

The kit decides a cell's stack, compile mode, task, preset, repeat, precision, devices, timed steps and model file
(and, for the per-step sync check, the sync); the engine and the host fill in the rest of the identity (threads,
warm-up, device model, image variant), which rows.py leaves out when it matches a row to a unit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from fwbench.core import registry
from fwbench.core.identity import file_tokens
from fwbench.core.spec import CellSpec

PUBLISHED = "published"
_REPEAT = re.compile(r"\.r(\d+)$")


@dataclass(frozen=True)
class Unit:
    spec: CellSpec
    # A user's model file: its path from the repository (the spec names the file by its SHA-256, the identity).
    model: str | None = None

    @classmethod
    def of(cls, stack: str, compile_mode: str, task: str, repeat: int, *, preset: str, precision: str = PUBLISHED,
           devices: int = 1, steps: int | None = None, model: str | None = None, model_sha256: str | None = None,
           per_step_sync: bool = True) -> "Unit":
        """steps: a shortened timed window (None: the preset's steps for the task)."""
        spec = CellSpec(stack, task, preset, compile_mode, data_dir="",
                        steps=steps or registry.default_steps(task, preset), warmup=registry.get_preset(preset).warmup,
                        repeat=repeat, precision=precision, devices=devices, per_step_sync=per_step_sync,
                        model_sha256=model_sha256, engine="current", image_variant="host")
        return cls(spec, model)

    @property
    def stack(self) -> str:
        return self.spec.stack

    @property
    def compile_mode(self) -> str:
        return self.spec.compile_mode

    @property
    def task(self) -> str:
        return self.spec.task

    @property
    def repeat(self) -> int:
        return self.spec.repeat

    @property
    def precision(self) -> str:
        return self.spec.precision

    @property
    def devices(self) -> int:
        return self.spec.devices

    @property
    def steps(self) -> int | None:
        """The timed steps when shortened (`fwbench run --steps`), None at the preset's."""
        return None if self.spec.steps == registry.default_steps(self.task, self.spec.preset) else self.spec.steps

    @property
    def key(self) -> str:
        """The unit's key in kit-state.json: its cell's key and repeat, as a row's file name reads them
        (`native-torch.bert-predict.paper.compile-none.prec-bf16.steps-13.r0`)."""
        return f"{self.cell_key}.r{self.repeat}"

    @property
    def cell_key(self) -> str:
        identity = self.spec.identity
        tokens = file_tokens(identity, {"steps": registry.default_steps(self.task, self.spec.preset)})
        return ".".join([identity.cell_key, *tokens])

    def other_repeat(self, repeat: int) -> "Unit":
        return replace(self, spec=replace(self.spec, repeat=repeat))


def cell_key_of(key: str) -> str:
    """A unit key without its repeat."""
    return _REPEAT.sub("", key)


def upgrade_key(key: str, preset: str) -> str:
    """A key of a kit state written before units were cell specs (`stack/mode/task@bf16@devices-2@steps-13@file-X/r0`)
    as today's key, so that an older kit-state.json (a published folder's) still resumes. Today's keys pass as
    they are."""
    if "/" not in key:
        return key
    stack, mode, rest, repeat = key.split("/")
    task, *settings = rest.split("@")
    found = dict(setting.split("-", 1) if "-" in setting else ("precision", setting) for setting in settings)
    tokens = ([f"prec-{found['precision']}"] if "precision" in found else []) + [
        f"{name}-{found[name]}" for name in ("steps", "devices", "file") if name in found]  # identity's token order
    return ".".join([f"{stack}.{task}.{preset}.compile-{mode}", *tokens, repeat])
