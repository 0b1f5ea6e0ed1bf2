"""A user's model file as a cell source (`fwbench run --model FILE`; the contract: docs/your-model.md).

The file defines `build_model()` (a Keras 3 model), `make_inputs(batch_size, rng)` (NumPy inputs and targets) and,
for fit, `keras_loss()`; optionally a PyTorch twin, `build_torch_model()` and `torch_loss(outputs, targets)`. Its
cells are named like the registry's tasks, from the file's name, the task kind and the batch size
(`my_model.py-fit-bs32`), and its SHA-256 is part of every cell's identity (`model_sha256`): an edited file is a new
cell.

Its inputs are made once from `make_inputs` with a fixed seed and kept with a SHA-256 manifest
(fwbench.core.model_inputs): every backend reads the same bytes.

Plain Python and NumPy: the runner, the cell process and the aggregator import it; the file itself is only ever
imported by a cell (fwbench.workloads.model_source).
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# The contract's names (docs/your-model.md).
BUILD_MODEL = "build_model"
MAKE_INPUTS = "make_inputs"
KERAS_LOSS = "keras_loss"
BUILD_TORCH_MODEL = "build_torch_model"
TORCH_LOSS = "torch_loss"
KINDS = ("fit", "predict")
DEFAULT_BATCH = 32

# <name>.py-<kind>-bs<batch>: a task id no registry task can have (theirs have no ".py"), and a safe file name.
_NAME = r"[A-Za-z0-9][A-Za-z0-9_-]{0,39}"
TASK_ID = re.compile(rf"^({_NAME})\.py-({'|'.join(KINDS)})-bs([1-9][0-9]{{0,6}})$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ModelFileError(Exception):
    """The model file breaks the contract (does not import, lacks a function, makes bad inputs): an error row,
    whose message's first line says what and where."""


@dataclass(frozen=True)
class ModelFile:
    """A model file as the runner sees it, without importing it: where it is, its SHA-256 and the names it
    defines at top level (read with `ast`; empty when the file does not parse, which its cells then report)."""

    path: Path
    sha256: str
    defines: frozenset[str]

    @property
    def name(self) -> str:
        """The file's name in task ids: its stem, with anything but letters, digits, _ and - made _."""
        return file_label(self.path)

    @property
    def has_twin(self) -> bool:
        return BUILD_TORCH_MODEL in self.defines


def read(path: str | Path) -> ModelFile:
    """The model file at `path`; ModelFileError (a usage error to the CLI) when there is no readable file."""
    path = Path(path).expanduser()
    try:
        payload = path.read_bytes()
    except IsADirectoryError:
        raise ModelFileError(f"--model {path}: is a folder, not a Python file") from None
    except OSError as exc:
        raise ModelFileError(f"--model {path}: {exc.strerror or type(exc).__name__}") from None
    return ModelFile(path.resolve(), hashlib.sha256(payload).hexdigest(), top_level_names(payload))


class ModelFileChanged(ModelFileError):
    """The file's SHA-256 is no longer the one its cells were planned with."""


def planned_bytes(path: str | Path, sha256: str) -> bytes:
    """The bytes of a model file its cells were planned with: ModelFileError ("<path>: <why>") when it cannot be
    read, ModelFileChanged when its SHA-256 is no longer `sha256` (each caller says what to do then)."""
    path = Path(path)
    try:
        payload = path.read_bytes()
    except OSError as exc:
        raise ModelFileError(f"{path}: {exc.strerror or type(exc).__name__}") from None
    if hashlib.sha256(payload).hexdigest() != sha256:
        raise ModelFileChanged(f"{path} is no longer the file planned (SHA-256 {str(sha256)[:12]}...)")
    return payload


def top_level_names(source: bytes) -> frozenset[str]:
    """Functions, classes and assignments at the file's top level (none when it does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return frozenset()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
    return frozenset(names)


def file_label(path: str | Path) -> str:
    stem = re.sub(r"[^A-Za-z0-9_-]", "_", Path(path).stem)[:40] or "model"
    return stem if stem[0].isalnum() else f"m{stem[:39]}"


@dataclass(frozen=True)
class ModelTask:
    name: str  # the file's label (file_label)
    kind: str  # fit or predict
    batch: int

    @property
    def id(self) -> str:
        return task_id(self.name, self.kind, self.batch)

    @property
    def model(self) -> str:
        """The `model` column of its rows: the file's name."""
        return f"{self.name}.py"


def task_id(name: str, kind: str, batch: int) -> str:
    task = f"{name}.py-{kind}-bs{batch}"
    if not TASK_ID.match(task):
        raise ModelFileError(f"cannot name a cell {task!r} (kind: {', '.join(KINDS)}; batch: 1 or more)")
    return task


def parse_task(task: str | None) -> ModelTask | None:
    """The model-file task a task id names, or None (a registry task, or not a task id at all)."""
    match = TASK_ID.match(task) if isinstance(task, str) else None
    return ModelTask(match.group(1), match.group(2), int(match.group(3))) if match else None


# -- what make_inputs returns --------------------------------------------------------------------------------------

def check_inputs(made: Any, batch: int) -> dict[str, np.ndarray]:
    """make_inputs' return value as named NumPy arrays ("x" or "x.<key>" for a dict of inputs, and "y"), or a
    ModelFileError saying what is wrong with it. Every array must be numeric with the batch on its first axis."""
    call = f"{MAKE_INPUTS}({batch}, rng)"
    if not isinstance(made, (tuple, list)) or len(made) != 2:
        raise ModelFileError(f"{call} must return (x, y), got {_kind_of(made)}")
    x, y = made
    if isinstance(x, dict):
        if not x:
            raise ModelFileError(f"{call} returned an empty dict of inputs")
        named = {}
        for key, value in x.items():
            if not isinstance(key, str) or not re.match(r"^[A-Za-z0-9_]{1,64}$", key):
                raise ModelFileError(f"{call}: input names must be letters, digits or _, got {key!r}")
            named[f"x.{key}"] = value
    else:
        named = {"x": x}
    named["y"] = y
    arrays = {}
    for name, value in named.items():
        try:
            array = np.asarray(value)
        except Exception as exc:  # a framework tensor NumPy cannot read, a ragged list...
            raise ModelFileError(f"{call}: {name} is not an array ({type(exc).__name__}: {exc})") from None
        if array.dtype.kind not in "biuf":
            raise ModelFileError(f"{call}: {name} has dtype {array.dtype}, not a number type")
        if array.ndim == 0 or array.shape[0] != batch:
            shape = tuple(array.shape)
            raise ModelFileError(f"{call}: {name} has shape {shape}, whose first axis is not the batch size {batch}")
        arrays[name] = np.ascontiguousarray(array)
    return arrays


def _kind_of(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__


def split_inputs(arrays: dict[str, np.ndarray]) -> tuple[Any, np.ndarray]:
    """(x, y) from the stored arrays: x an array, or a dict of arrays by input name."""
    if "x" in arrays:
        return arrays["x"], arrays["y"]
    return {name[2:]: array for name, array in arrays.items() if name.startswith("x.")}, arrays["y"]
