"""A cell spec: everything a cell process needs to know, passed to it as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from fwbench.core import axes
from fwbench.core import precision as precisions
from fwbench.core.identity import CellIdentity


def _axis_default(name: str):
    """The axis's default (fwbench.core.axes): a spec field of an axis with a fixed default takes it from there."""
    return axes.by_name()[name].default


PLACEMENT_FIELDS = ("cpu_set", "gpu_index", "gpu_indices")
# Left out of the JSON when unset, so that a cell whose fwbench predates them (an older image under the docker
# engine) still reads its spec.
OPTIONAL_FIELDS = (*PLACEMENT_FIELDS, "device", "device_setting", "sweep_point", "global_batch", "probe_weights",
                   "model_file", "model_sha256")


@dataclass(frozen=True)
class CellSpec:
    stack: str
    task: str
    preset: str
    compile_mode: str
    data_dir: str
    steps: int | None  # None only in a plan's base spec: each task's default (registry.default_steps)
    warmup: int = 2
    repeat: int = 0
    seed: int = _axis_default("data_seed")
    threads: int = 1
    per_step_sync: bool = _axis_default("per_step_sync")
    timeout_s: float = 900.0
    engine: str = "local"
    run_id: str = ""
    pin_set: str = _axis_default("pin_set")
    jit: str = _axis_default("jit")  # Keras jit_compile policy: published (per task, as published), on, off
    # published | fp32 | tf32 | bf16 | fp16 (fwbench.core.precision): the numeric precision the model runs in, and
    # with it the TF32 policy (`tf32`; --tf32 is an alias of this one axis).
    precision: str = _axis_default("precision")
    # Filled in by the runner from the engine and the host (part of the identity).
    image_variant: str = "venv"  # cpu | gpu (an image), venv (local engine), host (current engine)
    device_model: str | None = None  # GPU model (NVML) or CPU model the cell is expected to run on
    # The device the runner chose (fwbench.engines.device): "gpu" (the framework must see one, else the row is
    # device_unavailable) or "cpu" (no GPU is visible to the cell); None: whatever the framework finds (a spec
    # written before --device existed). device_setting: the --device the user gave (auto, gpu, cpu).
    device: str | None = None
    device_setting: str | None = None
    # Where the runner placed the cell (fwbench.engines.slots; not part of the identity): the CPU cores it is
    # pinned to ("0-3"; None: not pinned) and the NVML index of its (first) GPU (None: the engine's default);
    # gpu_indices: every GPU of a cell given several (--devices N: its slot's N GPUs, gpu_index first), None: one.
    cpu_set: str | None = None
    gpu_index: int | None = None
    gpu_indices: tuple[int, ...] | None = None
    # Test-only fault injection (never set by the CLI's normal options): "raise", "sleep:<s>",
    # "step-sleep:<ms>", "nan-loss" (a fit's last recorded loss reads as NaN), "overflow:<step>" (that fit step's loss
    # scaled into float16 overflow: fwbench.core.stability). Lets tests prove failure paths without a broken framework.
    fault: str | None = None
    # A version-sweep point (fwbench.core.sweep; part of the identity): "transformers==4.38.2" or "date:2024-03-01",
    # the environment the cell runs in being the pin set's with that change. None: no sweep.
    sweep_point: str | None = _axis_default("sweep_point")
    # Data-parallel scaling (fwbench.core.scaling; both part of the identity): the devices a fit runs data-parallel
    # on, and the global batch (None: weak scaling, the task's batch on each device; G: strong scaling, G / devices
    # per device).
    devices: int = _axis_default("devices")
    global_batch: int | None = _axis_default("global_batch")
    # Test-only (tests/test_scaling_equivalence.py; never set by the CLI): a fit builds its model with dropout off
    # and writes its weights after the last step to this .npz path (rank 0), so that data-parallel updates can be
    # compared with one device's.
    probe_weights: str | None = None
    # `fwbench stability` (fwbench.core.stability): an untimed fit on a learnable target that keeps every step's loss,
    # written as a stability record, never as a cell row. Left out of the JSON when False (older harnesses).
    stability_run: bool = False
    # `fwbench run --model FILE` (fwbench.core.model_file): the file the cell imports its model from, and its SHA-256
    # (part of the identity; the cell refuses a file that no longer has it). None: a registry task.
    model_file: str | None = None
    model_sha256: str | None = _axis_default("model_sha256")
    # Keras compile(steps_per_execution=N) (fwbench run --model --steps-per-execution; part of the identity): N steps
    # per call of the compiled step, the clock read around each call (fwbench.harness.clock). 1: one step a call.
    steps_per_execution: int = _axis_default("steps_per_execution")
    # Every axis without a field above (one declared in fwbench.core.axes with its option, axes.AxisOption): (axis
    # name, value) pairs, set from its option (MatrixOptions.base_spec); an axis not here is at its default. Left out
    # of the JSON when empty, so that older harnesses read the spec unchanged.
    axis_settings: tuple[tuple[str, Any], ...] = ()

    @property
    def cell_id(self) -> str:
        """The readable part of the identity: stack, task, preset and compile mode."""
        return self.identity.cell_key

    @property
    def identity(self) -> CellIdentity:
        return CellIdentity.of_spec(self)

    @property
    def gpus(self) -> tuple[int, ...]:
        """NVML indices of every GPU the runner gave the cell (empty: none placed)."""
        if self.gpu_indices:
            return tuple(self.gpu_indices)
        return () if self.gpu_index is None else (self.gpu_index,)

    @property
    def tf32(self) -> str:
        """The TF32 policy the precision runs with: default (the framework's own), on or off."""
        return precisions.tf32_of(self.precision)

    def to_json(self) -> str:
        fields = asdict(self)
        for name in OPTIONAL_FIELDS:
            if fields[name] is None:
                del fields[name]
        if not fields["stability_run"]:
            del fields["stability_run"]
        if fields["precision"] == "published":  # as a spec written before --precision existed
            del fields["precision"]
        if fields["devices"] == 1:  # as a spec written before --devices existed
            del fields["devices"]
        if fields["steps_per_execution"] == 1:  # as a spec written before --steps-per-execution existed
            del fields["steps_per_execution"]
        if not fields["axis_settings"]:  # as a spec written before axes without a field of their own existed
            del fields["axis_settings"]
        return json.dumps(fields, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "CellSpec":
        return cls.from_fields(json.loads(text))

    @classmethod
    def from_fields(cls, fields: dict) -> "CellSpec":
        """A spec from its fields, as written by to_json or a plan file; one written before --precision existed
        names a `tf32` policy instead, which is read as the precision it means."""
        fields = dict(fields)
        if "tf32" in fields:
            fields["precision"] = precisions.from_tf32(fields.pop("tf32"), fields.get("precision", "published"))
        if fields.get("gpu_indices") is not None:  # a JSON list; the spec is frozen (hashable)
            fields["gpu_indices"] = tuple(fields["gpu_indices"])
        if "axis_settings" in fields:  # JSON lists of [name, value]
            fields["axis_settings"] = tuple((name, value) for name, value in fields["axis_settings"])
        return cls(**fields)
