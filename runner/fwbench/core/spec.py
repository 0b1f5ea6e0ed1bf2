"""A cell spec: everything a cell process needs to know, passed to it as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from fwbench.core.identity import CellIdentity


PLACEMENT_FIELDS = ("cpu_set", "gpu_index")
# Left out of the JSON when unset, so that a cell whose fwbench predates them (an older image under the docker
# engine) still reads its spec.
OPTIONAL_FIELDS = (*PLACEMENT_FIELDS, "device", "device_setting", "sweep_point")


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
    seed: int = 0
    threads: int = 1
    tf32: str = "default"  # default (framework's own) | on | off
    per_step_sync: bool = True
    timeout_s: float = 900.0
    engine: str = "local"
    run_id: str = ""
    pin_set: str = "current"
    jit: str = "published"  # Keras jit_compile policy: published (per task, as published), on, off
    # Filled in by the runner from the engine and the host (part of the identity).
    image_variant: str = "venv"  # cpu | gpu (an image), venv (local engine), host (current engine)
    device_model: str | None = None  # GPU model (NVML) or CPU model the cell is expected to run on
    # The device the runner chose (fwbench.engines.device): "gpu" (the framework must see one, else the row is
    # device_unavailable) or "cpu" (no GPU is visible to the cell); None: whatever the framework finds (a spec
    # written before --device existed). device_setting: the --device the user gave (auto, gpu, cpu).
    device: str | None = None
    device_setting: str | None = None
    # Where the runner placed the cell (fwbench.engines.slots; not part of the identity): the CPU cores it is
    # pinned to ("0-3"; None: not pinned) and the NVML index of its one GPU (None: the engine's default).
    cpu_set: str | None = None
    gpu_index: int | None = None
    # Test-only fault injection (never set by the CLI's normal options): "raise", "sleep:<s>",
    # "step-sleep:<ms>". Lets tests prove failure paths without a broken framework.
    fault: str | None = None
    # A version-sweep point (fwbench.core.sweep; part of the identity): "transformers==4.38.2" or "date:2024-03-01",
    # the environment the cell runs in being the pin set's with that change. None: no sweep.
    sweep_point: str | None = None

    @property
    def cell_id(self) -> str:
        """The readable part of the identity: stack, task, preset and compile mode."""
        return self.identity.cell_key

    @property
    def identity(self) -> CellIdentity:
        return CellIdentity.of_spec(self)

    def to_json(self) -> str:
        fields = asdict(self)
        for name in OPTIONAL_FIELDS:
            if fields[name] is None:
                del fields[name]
        return json.dumps(fields, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "CellSpec":
        return cls(**json.loads(text))
