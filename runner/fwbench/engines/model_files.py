"""Plan the cells of a user's model file (`fwbench run --model FILE`; docs/your-model.md).

One cell per stack, task kind (fit and predict unless --task says) and repeat: every Keras 3 stack runs the file's Keras model with its own jit_compile
policy (--jit); native-torch runs the file's PyTorch twin eagerly and under each --compile mode. By default the
three Keras 3 stacks, and native-torch when the file defines a twin. The Keras stacks come first, so that the
twin's cells find the Keras model's parameter count to be checked against (fwbench.core.model_inputs).
"""

from __future__ import annotations

from dataclasses import replace

from fwbench.core import model_file, registry
from fwbench.core.model_file import ModelFile
from fwbench.core.spec import CellSpec
from fwbench.core.usage import UsageError


def runs_model_files(stack: registry.Stack) -> bool:
    """Keras 3 stacks run the file's Keras model; native (torch-family) stacks its PyTorch twin."""
    return stack.keras_version == 3 or stack.family == "torch"


def default_stacks(model: ModelFile) -> list[str]:
    return [stack_id for stack_id in registry.REPORT_ORDER if registry.STACKS[stack_id].keras_version == 3
            or (model.has_twin and registry.STACKS[stack_id].family == "torch")]


def check(stacks: list[str] | None, kinds: list[str] | None, compile_modes: list[str] | None) -> None:
    """A usage error (one line) for what a model file cannot be run with."""
    for kind in kinds or ():
        if kind not in model_file.KINDS:
            raise UsageError(f"--task with --model is the task kind: {' or '.join(model_file.KINDS)}, not '{kind}'")
    for stack_id in stacks or ():
        stack = registry.get_stack(stack_id)
        if not runs_model_files(stack):
            able = [s for s in registry.REPORT_ORDER if runs_model_files(registry.STACKS[s])]
            raise UsageError(f"--model: stack '{stack_id}' cannot run a model file (a Keras 3 model, or its PyTorch "
                             f"twin): choose from {', '.join(able)}")
    torch_stacks = [registry.STACKS[s] for s in registry.REPORT_ORDER
                    if registry.STACKS[s].family == "torch" and (not stacks or s in stacks)]
    for mode in compile_modes or ():
        if not torch_stacks:
            raise UsageError("--compile with --model sets the PyTorch twin's torch.compile modes, but no native "
                             "stack is in this run")
        for stack in torch_stacks:
            registry.check_compile_mode(stack, mode)


def plan(model: ModelFile, stacks: list[str] | None, kinds: list[str] | None, batch: int, *,
         compile_modes: list[str] | None, repeats: int, base: CellSpec) -> list[CellSpec]:
    """Every cell of the file: stack x kind x compile mode x repeat, Keras stacks first (report order)."""
    check(stacks, kinds, compile_modes)
    chosen = stacks or default_stacks(model)
    ordered = [s for s in registry.REPORT_ORDER if s in chosen]
    specs = []
    for stack_id in ordered:
        stack = registry.STACKS[stack_id]
        # Keras stacks keep their one mode (jit_compile is --jit's); the twin runs eager and each --compile mode.
        modes = list(dict.fromkeys([stack.compile_modes[0], *(compile_modes or [])])) if stack.family == "torch" \
            else [stack.compile_modes[0]]
        for kind in dict.fromkeys(kinds or model_file.KINDS):
            task = model_file.task_id(model.name, kind, batch)
            for mode in modes:
                for repeat in range(repeats):
                    specs.append(replace(base, stack=stack_id, task=task, compile_mode=mode, repeat=repeat,
                                         jit=base.jit if stack.family == "keras" else "published",
                                         # Keras's own option; a twin's step is one call whatever it says.
                                         steps_per_execution=base.steps_per_execution if stack.family == "keras"
                                         else 1,
                                         steps=base.steps or registry.default_steps(task, base.preset),
                                         model_file=str(model.path), model_sha256=model.sha256))
    return specs
