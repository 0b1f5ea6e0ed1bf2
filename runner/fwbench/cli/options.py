"""One definition of the options that select and configure cells (`run`, `demo`, `slurm submit`, `k8s render`,
`verify`): each option's name, default, help and validation is one field of MatrixOptions, and every planned
cell starts from MatrixOptions.base_spec.

A command takes them with the `matrix_options` decorator, which adds them to the command's signature (so Typer
shows them) and hands the command one checked MatrixOptions as its first argument:

    @app.command("run")
    @matrix_options()
    def run_cmd(options: MatrixOptions, out: Path = typer.Option(...)) -> None: ...

A command that means something else by an option declares it there, once, as an Override (`demo`'s steps
default to 5), or leaves it out (`omit`, `only`; an omitted option keeps its default, or the Override's).
Every value is checked before the command's body runs: a bad one is a UsageError (one line, exit 2) before
any cluster is probed, environment built, Docker asked or folder made. tests/test_options.py holds the
commands to this.

Adding an option (a precision, say) is one field below: its default, help, check and the CellSpec field it
sets (spec_field). An option that sets an axis of the cell (fwbench.core.axes) is declared with `_axis_option`:
its default and CellSpec field are the axis's, and tests/test_axes.py holds every settable axis to one option. An
axis that declares its option in the axes table (axes.AxisOption) instead needs nothing here: `matrix_options` adds
`--<axis-name>` for every such axis in axes.AXES when it decorates a command, MatrixOptions.axis_values holds the
values given, and base_spec passes them on (CellSpec.axis_settings).
"""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import InitVar, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import typer

from fwbench.core import axes
from fwbench.core import model_file
from fwbench.core import precision as precisions
from fwbench.core import registry
from fwbench.core import scaling
from fwbench.core.spec import CellSpec
from fwbench.core.usage import UsageError
from fwbench.cli.common import DEVICE_HELP, PIN_SET_HELP, check_pin_set
from fwbench.engines import model_files

TF32_POLICIES = ("default", "on", "off")


@dataclass(frozen=True)
class Declaration:
    """How the command line shows and checks one option (the field's default is its default)."""

    help: str
    check: Callable[[Any], None] | None = None  # raises UsageError (or RegistryError, SlotError) on a bad value
    default_text: str | None = None  # the default in words, where the value (None) does not say it
    required: bool = False
    envvar: str | None = None
    hidden: bool = False
    spec_field: str | None = None  # the CellSpec field the value goes to as given (others: base_spec)
    # Reads the command line's text into the field's type with a one-line UsageError (Typer's own type errors
    # are a multi-line box); the option is then shown to Typer as text.
    parse: Callable[[Any], Any] | None = None
    # Shown only by the commands that ask for it (matrix_options(opt_in=...)): `run --model`.
    opt_in: bool = False
    axis: str | None = None  # the axis of the cell identity this option sets (fwbench.core.axes)


_UNCHANGED: Any = object()


@dataclass(frozen=True)
class Override:
    """Where one command means something else by an option: another default (its default_text goes with
    it), help or requiredness."""

    default: Any = _UNCHANGED
    default_text: str | None = None
    help: str | None = None
    required: bool | None = None


# The commands that take `--model FILE` (run, slurm submit, k8s render) show these options (each defined once, below);
# there --stack is optional and --task is a task kind.
MODEL_FILE_OPTIONS = ("model", "batch", "steps_per_execution")
MODEL_FILE_OVERRIDES = {
    "stack": Override(required=False, default_text="required, but for --model: the Keras 3 stacks, and native-torch "
                                                   "when the file has a PyTorch twin"),
    "task": Override(help="Task id (repeatable); with --model, the kind: fit or predict.",
                     default_text="all 12; with --model, fit and predict"),
}


def require_stack_or_model(options: "MatrixOptions") -> None:
    """A command with MODEL_FILE_OVERRIDES needs --stack unless it runs a model file."""
    if not options.stack and options.model is None:
        raise UsageError("Missing option '--stack' (repeatable; or --model FILE: docs/your-model.md)")


def _declared(default: Any, help: str, **declaration: Any) -> Any:
    return field(default=default, metadata={"option": Declaration(help, **declaration)})


def _axis_option(name: str, help: str, *, direct: bool = True, **declaration: Any) -> Any:
    """An option that sets the axis `name`: the axis's default (None where the host or preset decides) and, when the
    value goes to the spec as given (`direct`), the axis's CellSpec field."""
    axis = axes.by_name()[name]
    default = declaration.pop("default", axis.unset_value)
    return _declared(default, help, axis=name, spec_field=axis.spec_field if direct else None, **declaration)


def _each(check: Callable[[Any], Any]) -> Callable[[Any], None]:
    return lambda values: [check(value) for value in values]


def _choice(what: str, choices: tuple[str, ...]) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value not in choices:
            raise UsageError(f"unknown {what} '{value}' (choose from: {', '.join(choices)})")
    return check


def _at_least(flag: str, least: int) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value < least:
            raise UsageError(f"{flag} must be at least {least}, got {value}")
    return check


def _integer(flag: str) -> Callable[[Any], Any]:
    def parse(value: Any) -> Any:
        if value is None or isinstance(value, int):
            return value
        try:
            return int(str(value).strip())
        except ValueError:
            raise UsageError(f"{flag} must be an integer, got '{value}'") from None
    return parse


def _positive(flag: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if not value > 0:
            raise UsageError(f"{flag} must be more than 0, got {value:g}")
    return check


def _device(value: str) -> None:
    from fwbench.engines import device as devices

    devices.check_setting(value)


def _parallel(value: str) -> None:
    from fwbench.engines import slots

    slots.parse_parallel(value)


@dataclass(frozen=True)
class MatrixOptions:
    stack: Optional[List[str]] = _declared(
        None, "Stack id (repeatable); see `fwbench list`.", check=_each(registry.get_stack), required=True)
    task: Optional[List[str]] = _declared(None, "Task id (repeatable).", check=_each(registry.get_task),
                                          default_text="all 12")
    preset: str = _declared("tiny", "tiny, small or paper.", check=registry.get_preset, envvar="FWBENCH_PRESET",
                            spec_field="preset")
    # Checked against each stack's modes in MatrixOptions.check.
    compile: Optional[List[str]] = _declared(
        None, "native-torch: none, reduce-overhead, default, max-autotune (repeatable).",
        default_text="each stack's first: none, or xla for Keras")
    steps: Optional[int] = _axis_option("steps", "Timed steps.", check=_at_least("--steps", 1),
                                        default_text="the preset's; at paper, 10 for generate")
    # The preset's when not given (base_spec).
    warmup: Optional[int] = _axis_option("warmup", "Untimed warm-up steps.", check=_at_least("--warmup", 0),
                                         default_text="the preset's, 2", direct=False)
    repeats: int = _declared(1, "Independent processes per cell.", check=_at_least("--repeats", 1))
    timeout: Optional[float] = _declared(None, "Per-cell timeout in seconds.", check=_positive("--timeout"),
                                         default_text="the preset's")
    # The command's engine resolves it (None: the current pin set, or the image's).
    pin_set: Optional[str] = _axis_option("pin_set", PIN_SET_HELP, check=check_pin_set, envvar="FWBENCH_PIN_SET",
                                          default=None, direct=False)
    jit: str = _axis_option("jit", "Keras XLA: published (each task as in the published run), on, off.",
                            check=_choice("--jit policy", registry.JIT_POLICIES))
    # With its --tf32 alias applied (resolved_precision).
    precision: str = _axis_option("precision", "Numeric precision: published (as the published table ran each task: "
                               "the LLMs in bfloat16, the others in float32 with the framework's TF32 default), "
                               "fp32 (TF32 off), tf32 (TF32 on), bf16 or fp16 (mixed precision in each stack's "
                               "own idiom; the LLMs in that type).",
                               check=_choice("--precision", precisions.PRECISIONS), direct=False)
    tf32: str = _declared("default", "TF32 policy, an alias of --precision: default (published), on (tf32), off "
                          "(fp32).", check=_choice("TF32 policy", TF32_POLICIES))
    # The command decides from the host and the slots (base_spec's threads).
    threads: Optional[int] = _axis_option("threads", "CPU threads per cell.", check=_at_least("--threads", 1),
                                          default_text="all cores, or the cores of a cell's slot where cells run side "
                                                       "by side", direct=False)
    data: Optional[Path] = _declared(None, "Shared data folder.",
                                     default_text="$FWBENCH_DATA or ~/.cache/fwbench/data")
    seed: int = _axis_option("data_seed", "Seed of the shared data.")
    per_step_sync: bool = _axis_option("per_step_sync", "Sync after every timed step (per-step times).")
    devices: int = _axis_option("devices", "Data-parallel devices per fit cell (each stack's own data parallelism; on a CPU, "
                             "logical devices sharing the cell's cores: correctness, not speed). Other tasks with "
                             "more than 1 are unsupported rows.", check=_at_least("--devices", 1),
                             parse=_integer("--devices"))
    global_batch: Optional[int] = _axis_option("global_batch", "Strong scaling: the global batch, split evenly over --devices.",
                                            check=_at_least("--global-batch", 1),
                                            default_text="weak scaling, the task's batch on each device",
                                            parse=_integer("--global-batch"))
    device: str = _declared("auto", DEVICE_HELP, check=_device, spec_field="device_setting")
    parallel: str = _declared("1", "Cells at once, each on CPU cores (and a GPU) of its own: a number, or auto (one "
                                   "per GPU; on a CPU-only host one per --threads cores).", check=_parallel)
    inject_fault: Optional[str] = _declared(None, "Testing only: raise | sleep:S | step-sleep:MS | "
                                                  "step-sleep-from:PACKAGE==VERSION:MS | nan-loss | overflow:STEP.",
                                            hidden=True, spec_field="fault")
    # A user's model file as the cells' source (docs/your-model.md): `run` only.
    # Its SHA-256 is the axis (model_files.plan reads the file).
    model: Optional[Path] = _axis_option("model_sha256", "Your model file (docs/your-model.md): its Keras 3 model on "
                                         "every Keras 3 stack and its PyTorch twin, if it has one, on native-torch.",
                                         opt_in=True, direct=False)
    batch: Optional[int] = _declared(None, "Batch size of --model's cells.", check=_at_least("--batch", 1),
                                     default_text=f"{model_file.DEFAULT_BATCH}", parse=_integer("--batch"), opt_in=True)
    steps_per_execution: int = _axis_option(
        "steps_per_execution", "Keras compile(steps_per_execution=N) for --model's Keras cells: N steps per call of "
        "the compiled step (must divide --steps; the twin runs one a call).",
        check=_at_least("--steps-per-execution", 1), opt_in=True, parse=_integer("--steps-per-execution"))
    # The values given to the options of the axes that declare one in the axes table (axes.AxisOption; table_axes),
    # by axis name, parsed: `matrix_options` fills it in, base_spec passes it on (CellSpec.axis_settings); an axis not
    # here is at its default. Not a field (the fields above are the one definition's options), but kept by replace().
    axis_values: InitVar[Optional[Dict[str, Any]]] = None

    def __post_init__(self, axis_values: Optional[Dict[str, Any]]) -> None:
        object.__setattr__(self, "axis_values", dict(axis_values or {}))

    def check(self) -> None:
        """Every value, in the order of the fields; a bad one raises a one-line error."""
        unknown = set(self.axis_values) - set(table_axes())
        if unknown:
            raise TypeError(f"not axes with an option of their own (axes.AxisOption): {sorted(unknown)}")
        # With --model, --task is a task kind and --compile the PyTorch twin's modes (fwbench.engines.model_files).
        checked_elsewhere = ("task",) if self.model is not None else ()
        for option in fields(self):
            value, check = getattr(self, option.name), declaration(option.name).check
            if value is not None and check is not None and option.name not in checked_elsewhere:
                check(value)
        if self.model is not None:
            self.model_file()
            model_files.check(self.stack, self.task, self.compile)
        elif self.batch is not None:
            raise UsageError("--batch sets the batch size of --model's cells: give --model FILE too")
        elif self.steps_per_execution != 1:
            raise UsageError("--steps-per-execution sets Keras's steps_per_execution for --model's cells: give --model "
                             "FILE too")
        else:
            for stack_id in self.stack or ():
                for mode in self.compile or ():
                    registry.check_compile_mode(registry.get_stack(stack_id), mode)
        if self.steps_per_execution > 1:
            steps = self.steps or registry.get_preset(self.preset).steps  # a model file's fit and predict
            if steps % self.steps_per_execution:
                raise UsageError(f"--steps-per-execution {self.steps_per_execution} must divide the timed steps "
                                 f"({steps}: --steps, or the preset's)")
        self.resolved_precision()
        try:
            scaling.check(self.devices, self.global_batch)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    def resolved_precision(self) -> str:
        """--precision with its --tf32 alias applied (they must not contradict each other)."""
        try:
            return precisions.from_tf32(self.tf32, self.precision)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    def base_spec(self, *, data_dir: str, threads: int, **spec_fields: Any) -> CellSpec:
        """The spec every planned cell starts from (fwbench.engines.matrix.plan fills in stack, task, compile mode
        and repeat). data_dir and threads are the command's to decide; spec_fields sets what its engine or
        cluster decides (pin set, device, image variant...)."""
        preset = registry.get_preset(self.preset)
        given = {declaration(option.name).spec_field: getattr(self, option.name) for option in fields(self)
                 if declaration(option.name).spec_field}
        axis_settings = tuple((axis.name, self.axis_values[axis.name]) for axis in axes.AXES
                              if axis.name in self.axis_values)
        spec = CellSpec(stack="", task="", compile_mode="", data_dir=data_dir, threads=threads,
                        warmup=preset.warmup if self.warmup is None else self.warmup,
                        timeout_s=self.timeout or preset.timeout_s, precision=self.resolved_precision(),
                        axis_settings=axis_settings, **given)
        return replace(spec, **spec_fields)

    def plan(self, base: CellSpec) -> list[CellSpec]:
        """Every cell of these options (stack x task x compile mode x repeat), from `base`."""
        from fwbench.engines import matrix

        if self.model is not None:
            return model_files.plan(self.model_file(), self.stack, self.task, self.batch or model_file.DEFAULT_BATCH,
                                    compile_modes=self.compile, repeats=self.repeats, base=base)
        return matrix.plan(self.stack or [], self.task, self.preset, self.compile, self.repeats, base=base)

    def model_file(self) -> model_file.ModelFile:
        """--model's file (its SHA-256 and what it defines), or a usage error when there is no readable file."""
        try:
            return model_file.read(self.model)
        except model_file.ModelFileError as exc:
            raise UsageError(str(exc)) from None


def declaration(name: str) -> Declaration:
    return _FIELDS[name].metadata["option"]


_FIELDS = {option.name: option for option in fields(MatrixOptions)}
_TYPES = typing.get_type_hints(MatrixOptions)


def table_axes() -> dict[str, axes.Axis]:
    """The axes that declare their option in the axes table (axes.AxisOption) and have no field here, by name: read
    from axes.AXES as it is now (when a command is decorated), so an axis declared later is an option too."""
    fielded = {declaration(name).axis for name in _FIELDS}
    return {axis.name: axis for axis in axes.AXES if axis.option is not None and axis.name not in fielded}


@dataclass(frozen=True)
class CommandOptions:
    """What a command took (for tests/test_options.py): the options it shows and its overrides."""

    names: tuple[str, ...]
    overrides: dict[str, Override]


def matrix_options(*, omit: tuple[str, ...] = (), only: tuple[str, ...] | None = None, opt_in: tuple[str, ...] = (),
                   **overrides: Override) -> Callable[[Callable], Callable]:
    """Give a command the matrix options (all, `only` these, or all but `omit`; opt-in ones only when named in
    `opt_in`), with its overrides; the command receives them as one checked MatrixOptions, its first parameter.
    The options of the axes that declare theirs in the axes table (table_axes) come after the fields' (omit and only
    name them too; they take no overrides)."""
    table = table_axes()
    if set(table) & set(_FIELDS):
        raise TypeError(f"axes named like a matrix option: {sorted(set(table) & set(_FIELDS))}")
    unknown = (set(omit) | set(only or ()) | set(opt_in) | set(overrides)) - (set(_FIELDS) | set(table))
    if unknown or set(overrides) - set(_FIELDS):
        raise TypeError(f"not matrix options: {sorted(unknown | (set(overrides) - set(_FIELDS)))}")
    names = tuple(name for name in _FIELDS if (only is None or name in only) and name not in omit
                  and (not declaration(name).opt_in or name in opt_in))
    axis_names = tuple(name for name in table if (only is None or name in only) and name not in omit)
    fixed = {name: override.default for name, override in overrides.items()
             if name not in names and override.default is not _UNCHANGED}

    def decorate(command: Callable) -> Callable:
        hints = typing.get_type_hints(command)
        own = [parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY,
                                 annotation=hints.get(parameter.name, parameter.annotation))
               for parameter in list(inspect.signature(command).parameters.values())[1:]]
        shown = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=_shown_type(name),
                                   default=_typer_option(name, overrides.get(name))) for name in names]
        shown += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                                    default=_axis_typer_option(table[name])) for name in axis_names]
        if {p.name for p in own} & {p.name for p in shown}:
            raise TypeError(f"{command.__name__} has a parameter named like a matrix option: "
                            f"{sorted({p.name for p in own} & {p.name for p in shown})}")

        @functools.wraps(command)
        def with_options(**values: Any) -> Any:
            given = {name: values.pop(name) for name in axis_names}
            options = MatrixOptions(**fixed, **{name: _parsed(name, values.pop(name)) for name in names},
                                    axis_values={name: _axis_parsed(table[name], text) for name, text in given.items()
                                                 if text is not None})
            options.check()
            return command(options, **values)

        # Typer reads the signature and annotations: the matrix options first, then the command's own.
        with_options.__signature__ = inspect.Signature([*shown, *own])
        with_options.__annotations__ = {p.name: p.annotation for p in (*shown, *own)}
        with_options.matrix_options = CommandOptions((*names, *axis_names), dict(overrides))
        return with_options

    return decorate


def _shown_type(name: str) -> Any:
    """The type Typer parses an option as: text where the option parses itself (Declaration.parse)."""
    return Optional[str] if declaration(name).parse else _TYPES[name]


def _parsed(name: str, value: Any) -> Any:
    parse = declaration(name).parse
    return parse(value) if parse else value


def _typer_option(name: str, override: Override | None) -> Any:
    declared, default = declaration(name), _FIELDS[name].default
    help, default_text, required = declared.help, declared.default_text, declared.required
    if override is not None:
        help = override.help or help
        if override.default is not _UNCHANGED:
            default, default_text = override.default, override.default_text
        elif override.default_text is not None:
            default_text = override.default_text
        required = required if override.required is None else override.required
    if default_text and not required:  # a required option has no default to name
        help = help.rstrip(".") + f" (default: {default_text})."
    return typer.Option(... if required else default, help=help, envvar=declared.envvar, hidden=declared.hidden,
                        metavar="<int>" if declared.parse else None)


def _axis_flag(axis: axes.Axis) -> str:
    return "--" + axis.name.replace("_", "-")


def _axis_parsed(axis: axes.Axis, text: str) -> Any:
    """The value of an axis's option (axes.AxisOption.parse), or a one-line UsageError naming the option."""
    try:
        return axis.option.parse(text)
    except ValueError as exc:
        raise UsageError(f"{_axis_flag(axis)}: {exc}") from None


def _axis_typer_option(axis: axes.Axis) -> Any:
    """The option of an axis declared in the table: not given (None), the axis's default."""
    default = ("the host's or preset's" if axis.default is axes.HOST else "none" if axis.default is None
               else str(axis.default))
    return typer.Option(None, _axis_flag(axis), help=axis.option.help.rstrip(".") + f" (default: {default}).",
                        metavar=axis.option.metavar)
