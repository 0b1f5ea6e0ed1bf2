"""A cell spec: everything a cell process needs to know, passed to it as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class CellSpec:
    stack: str
    task: str
    preset: str
    compile_mode: str
    data_dir: str
    steps: int
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
    # Test-only fault injection (never set by the CLI's normal options): "raise", "sleep:<s>",
    # "step-sleep:<ms>", "memory-hog". Lets tests prove failure paths without a broken framework.
    fault: str | None = None

    @property
    def cell_id(self) -> str:
        """Identifies the cell (not the repeat): stack, task, preset and variant."""
        return f"{self.stack}.{self.task}.{self.preset}.compile-{self.compile_mode}"

    def result_path(self, out_dir: Path) -> Path:
        """Where this cell-repeat's one Parquet file lives; deterministic, so reruns overwrite."""
        return (Path(out_dir) / self.preset / self.stack
                / f"{self.task}.compile-{self.compile_mode}.r{self.repeat}.parquet")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "CellSpec":
        return cls(**json.loads(text))
