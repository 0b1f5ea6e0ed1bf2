"""`fwbench show STACK TASK`: a cell's timed call, the files its code is in and the settings it runs with, from
the same data as the cell table of docs/stacks.md (fwbench.cli.stackdoc), so the timed code is found from the
command line."""

from __future__ import annotations

import typer

from fwbench.core import registry
from fwbench.cli import stackdoc
from fwbench.cli.options import MatrixOptions, declaration

# Where every cell's timed window is measured (the device synced before each read), whatever its stack.
HARNESS_CLOCK = "fwbench.harness.clock"


def describe_cell(stack_id: str, task_id: str, preset: str) -> list[str]:
    """The lines `fwbench show` prints (RegistryError for an unknown stack, task or preset)."""
    stack, task, preset_obj = registry.get_stack(stack_id), registry.get_task(task_id), registry.get_preset(preset)
    item = stackdoc.entry(stack, task)
    lines = [f"{stack.id} {task.id}: {task.label}, preset {preset}"]
    files = item.files
    if item.cell is None:
        lines.append(f"timed call: nothing, an unsupported row: {stack.unsupported_reason(task.model)}")
    else:
        lines += [f"timed call: {item.cell.timed}",
                  f"cell class: {item.cell.name} ({item.cell.base}) in {stackdoc.relative(item.cell.module)}"]
        files += (stackdoc.relative(HARNESS_CLOCK),)
    lines.append("files:")
    lines += [f"  {path}" for path in files]
    lines += [f"batch size: {registry.workload(task.id, preset).batch_size}",
              f"steps: {registry.default_steps(task.id, preset)} timed after {preset_obj.warmup} warm-up "
              "(the preset's defaults; --steps, --warmup)",
              f"harness backend: {stack.harness_backend}",
              f"compile modes: {', '.join(stack.compile_modes)}"]
    jit = stack.jit_compile(task.id)
    if jit is not None:
        lines.append(f"jit_compile: {jit} (as published; --jit on or off forces it)")
    return lines


def register(app: typer.Typer) -> None:
    @app.command("show")
    def show_cmd(
        stack: str = typer.Argument(..., help="Stack id; see `fwbench list`."),
        task: str = typer.Argument(..., help="Task id."),
        # --preset as `run` declares it (its default and FWBENCH_PRESET), with this command's help.
        preset: str = typer.Option(MatrixOptions.preset, envvar=declaration("preset").envvar,
                                   help="Preset whose batch size and step counts to show: tiny, small or paper."),
    ) -> None:
        """Show a cell's timed call, the files of its code and its settings."""
        for line in describe_cell(stack, task, preset):
            print(line)
