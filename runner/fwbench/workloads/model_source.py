"""A user's model file, imported in a cell process (`fwbench run --model`; the contract: docs/your-model.md).

Everything the file does runs through here, so that whatever it gets wrong (it does not import, lacks a function,
raises on this backend, makes inputs of the wrong shape) becomes a ModelFileError whose first line says what,
where in the file, and on which stack: the cell's row then carries it, and the other backends still run.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import numpy as np

from fwbench.core import model_file, model_inputs
from fwbench.core.model_file import ModelFileError
from fwbench.core.spec import CellSpec

# Left as they are (not wrapped): the harness classifies them (oom) by their type.
_PASSED_THROUGH = ("MemoryError", "OutOfMemoryError", "ResourceExhaustedError", "KeyboardInterrupt")


class ModelSource:
    """The imported file: its functions, called with their failures said in one line."""

    def __init__(self, module: ModuleType, path: Path, stack: str):
        self.module, self.path, self.stack = module, path, stack

    @property
    def name(self) -> str:
        return self.path.name

    def has(self, function: str) -> bool:
        return callable(getattr(self.module, function, None))

    def function(self, function: str, why: str = "") -> Callable[..., Any]:
        found = getattr(self.module, function, None)
        if not callable(found):
            raise ModelFileError(f"{self.name} defines no {function}(){why} (the contract: docs/your-model.md)")
        return found

    def call(self, function: str, *args: Any, why: str = "") -> Any:
        """`function(*args)` from the file; its failure as a ModelFileError naming the function, the stack and the
        line of the file it came from."""
        found = self.function(function, why)
        try:
            return found(*args)
        except BaseException as exc:  # noqa: BLE001 - said in one line below, the original chained
            if type(exc).__name__ in _PASSED_THROUGH:
                raise
            raise ModelFileError(f"{self.name}: {function}() failed on {self.stack}: "
                                 f"{describe(exc, self.path)}") from exc


def load(spec: CellSpec) -> ModelSource:
    """Import the spec's model file, after checking it is still the file the run was planned with."""
    path = Path(spec.model_file or "")
    try:
        model_file.planned_bytes(path, spec.model_sha256)
    except model_file.ModelFileChanged:
        raise ModelFileError(f"{path.name} changed after the run was planned (its SHA-256 is no longer "
                             f"{str(spec.model_sha256)[:12]}...): run again to measure the new file") from None
    name = f"fwbench_model_file_{spec.model_sha256[:16]}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up there
    # The file's own folder last: a helper beside it imports, and it can never shadow an installed package.
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    try:
        module_spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - said in one line below
        sys.modules.pop(name, None)
        if type(exc).__name__ in _PASSED_THROUGH:
            raise
        raise ModelFileError(f"{path.name} does not import on {spec.stack}: {describe(exc, path)}") from exc
    return ModelSource(module, path, spec.stack)


def describe(exc: BaseException, path: Path) -> str:
    """'ValueError: the message's first line (my_model.py line 12)': the last line of the file the error passed."""
    # A SyntaxError's own text names the file and line again: its message only.
    lines = str(exc.msg if isinstance(exc, SyntaxError) else exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__
    line = getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) else None
    if isinstance(exc, SyntaxError) and exc.filename and Path(exc.filename).name != path.name:
        line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename) == path:
            line = frame.lineno
    return f"{text} ({path.name} line {line})" if line else text


def inputs(ctx_spec: CellSpec, source: ModelSource, batch: int) -> tuple[dict[str, np.ndarray], str, bool]:
    """The cell's inputs: the ones an earlier cell of this file, batch and seed made (checked by SHA-256), else
    make_inputs(batch, rng) called now, checked and kept for the cells after it. (arrays, SHA-256, made here)."""
    folder = model_inputs.inputs_folder(ctx_spec.data_dir, ctx_spec.model_sha256, batch, ctx_spec.seed)
    source.function(model_file.MAKE_INPUTS)  # a missing function is said before any folder is made
    return model_inputs.load_or_make(
        folder, lambda: source.call(model_file.MAKE_INPUTS, batch, model_inputs.input_rng(ctx_spec.seed)), batch)
