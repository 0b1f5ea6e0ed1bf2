"""The options that select and configure cells have one definition (fwbench.cli.options): every command that
takes them shows the same names, defaults and help but for the overrides it declares, and refuses a bad value
with exit 2 and one line before it does anything else."""

from __future__ import annotations

import sys
from dataclasses import fields

import pytest
import typer

from fwbench.cli import options as matrix
from fwbench.cli.commands import app, main

ALL_OPTIONS = [f.name for f in fields(matrix.MatrixOptions)]
# Shown only by the commands that name them (matrix_options(opt_in=...)): run's --model and --batch.
OPT_IN = [name for name in ALL_OPTIONS if matrix.declaration(name).opt_in]
# The commands that take the matrix options, what each leaves out and where it means something else (the
# declared overrides): nothing else may differ from the one definition.
EXPECTED = {
    ("run",): ((), {"stack", "task"}),
    ("demo",): (("preset", "compile"), {"stack", "steps", "parallel", "data"}),
    ("slurm", "submit"): (("parallel",), {"threads", "device", "stack", "task"}),
    ("k8s", "render"): (("data", "device", "parallel"), {"threads", "stack", "task"}),
    ("verify",): (tuple(name for name in ALL_OPTIONS if name not in ("task", "repeats", "device")), {"task", "repeats"}),
    ("data",): (tuple(name for name in ALL_OPTIONS if name not in ("task", "preset", "seed")), set()),
    ("sweep",): (("parallel",), set()),
    ("bisect",): (("parallel",), {"task", "repeats"}),
    ("watch",): (("parallel",), {"repeats"}),
    ("stability",): (("compile", "warmup", "repeats", "per_step_sync", "parallel", "jit", "devices", "global_batch"),
                     {"task", "precision", "steps"}),
}
# The commands that take `--model FILE` (the opt-in options) and its overrides (fwbench.cli.options.MODEL_FILE_OVERRIDES).
MODEL_FILE_COMMANDS = {("run",), ("slurm", "submit"), ("k8s", "render")}
# Options that only choose what to act on, which other commands (list, env, doctor, publish) take in their own sense.
CHOOSING = {"stack", "task", "preset", "pin_set", "device"}


def commands(group=None, path: tuple[str, ...] = ()):
    """(path, command) of every command of the fwbench app, e.g. (("slurm", "submit"), <its click command>)."""
    group = group or typer.main.get_command(app)
    if hasattr(group, "commands"):
        for name, command in group.commands.items():
            yield from commands(command, (*path, name))
    else:
        yield path, group


def shown(command) -> dict:
    return {param.name: param for param in command.params if param.name in ALL_OPTIONS}


def test_only_the_expected_commands_take_matrix_options_and_only_through_the_one_definition():
    taking = {path: command for path, command in commands()
              if hasattr(command.callback, "matrix_options") or set(shown(command)) - CHOOSING}
    assert set(taking) == set(EXPECTED)
    for path, command in taking.items():
        declared = command.callback.matrix_options  # set by matrix_options: not declared by hand
        omitted, overridden = EXPECTED[path]
        assert set(declared.overrides) - set(omitted) == overridden, path
        opted_in = OPT_IN if path in MODEL_FILE_COMMANDS else []
        assert list(shown(command)) == [name for name in ALL_OPTIONS if name not in omitted
                                        and (name not in OPT_IN or name in opted_in)], path


def reference_options() -> dict:
    """The options as the one definition declares them, without any command's overrides."""
    probe = typer.Typer()

    @probe.command()
    @matrix.matrix_options(opt_in=tuple(OPT_IN))
    def reference(options: matrix.MatrixOptions) -> None:
        """The reference."""

    return {param.name: param for param in typer.main.get_command(probe).params}


@pytest.mark.parametrize("path", list(EXPECTED), ids=" ".join)
def test_names_defaults_and_help_are_the_one_definitions_but_for_declared_overrides(path):
    command = dict(commands())[path]
    reference = reference_options()
    _omitted, overridden = EXPECTED[path]
    for name, param in shown(command).items():
        if name in overridden:
            continue
        base = reference[name]
        assert (param.opts, param.secondary_opts, param.default, param.required, param.help, param.envvar,
                param.hidden) == (base.opts, base.secondary_opts, base.default, base.required, base.help,
                                  base.envvar, base.hidden), (path, name)


# Arguments each command needs besides the bad one (none of them points at anything that exists).
REQUIRED = {
    ("run",): ["--stack", "native-torch", "--out", "{tmp}/out"],
    ("demo",): ["--stack", "native-torch", "--out", "{tmp}/out"],
    ("slurm", "submit"): ["--stack", "native-torch", "--out", "{tmp}/out"],
    ("k8s", "render"): ["--stack", "keras3-jax", "--release", "{tmp}/release.json", "-o", "{tmp}/out"],
    ("verify",): ["{tmp}/bundle.tar.gz", "--out", "{tmp}/out"],
    ("data",): ["--out", "{tmp}/out"],
    ("sweep",): ["--stack", "native-torch", "--vary", "tqdm=1.0", "--out", "{tmp}/out"],
    ("bisect",): ["--stack", "native-torch", "--task", "bert-fit", "--package", "tqdm", "--good", "1.0", "--bad", "2.0",
                  "--versions", "1.0,2.0", "--out", "{tmp}/out"],
    ("watch",): ["--stack", "native-torch", "--package", "tqdm", "--versions", "1.0", "--store", "{tmp}/store", "--out",
                 "{tmp}/out"],
    ("stability",): ["--stack", "native-torch", "--task", "bert-fit", "--precision", "fp16", "--out", "{tmp}/out"],
}
BAD = [("stack", ["--stack", "nope"], "unknown stack 'nope'"),
       ("task", ["--task", "bert-fly"], "unknown task 'bert-fly'"),
       ("preset", ["--preset", "huge"], "unknown preset 'huge'"),
       ("compile", ["--compile", "bogus"], "compile mode 'bogus' is not available"),
       ("pin_set", ["--pin-set", "paper-2025"], "unknown pin set 'paper-2025'"),
       ("jit", ["--jit", "maybe"], "unknown --jit policy 'maybe'"),
       ("tf32", ["--tf32", "bogus"], "unknown TF32 policy 'bogus'"),
       ("device", ["--device", "tpu"], "unknown --device 'tpu'"),
       ("steps", ["--steps", "0"], "--steps must be at least 1, got 0"),
       ("warmup", ["--warmup", "-1"], "--warmup must be at least 0, got -1"),
       ("repeats", ["--repeats", "0"], "--repeats must be at least 1, got 0"),
       ("timeout", ["--timeout", "0"], "--timeout must be more than 0, got 0"),
       ("threads", ["--threads", "0"], "--threads must be at least 1, got 0"),
       ("parallel", ["--parallel", "many"], "--parallel must be a positive number or auto"),
       ("devices", ["--devices", "0"], "--devices must be at least 1, got 0"),
       ("devices", ["--devices", "two"], "--devices must be an integer, got 'two'"),
       ("global_batch", ["--global-batch", "0"], "--global-batch must be at least 1, got 0"),
       ("global_batch", ["--devices", "2", "--global-batch", "3"],
        "--global-batch 3 does not split evenly over --devices 2")]


def fwbench_main(monkeypatch, capsys, args: list[str]) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["fwbench", *args])
    with pytest.raises(SystemExit) as done:
        main()
    return done.value.code, capsys.readouterr().err


@pytest.mark.parametrize("path, option, args, message", [
    pytest.param(path, *bad, id=f"{' '.join(path)}-{bad[0]}")
    for path, (omitted, _overridden) in EXPECTED.items() for bad in BAD if bad[0] not in omitted])
def test_a_bad_value_is_one_line_and_exit_2_before_anything_else(tmp_path, monkeypatch, capsys, path, option, args,
                                                                  message):
    required = [arg.format(tmp=tmp_path) for arg in REQUIRED[path]]
    if option == "stack":
        required = required[2:] if required[0] == "--stack" else required
    # Nothing may run before the check: no cluster is asked (sbatch, kubectl, docker are not on this PATH) ...
    monkeypatch.setenv("PATH", "/nonexistent")
    code, err = fwbench_main(monkeypatch, capsys, [*path, *required, *args])
    assert code == 2
    assert err.splitlines() == [err.strip()] and err.startswith("error: ") and message in err, err
    assert list(tmp_path.iterdir()) == []  # ... and no folder is made


def test_base_spec_carries_every_option_that_sets_a_spec_field():
    options = matrix.MatrixOptions(stack=["native-torch"], preset="small", steps=7, warmup=0, timeout=5.0, jit="on",
                                   tf32="off", seed=3, per_step_sync=False, device="cpu", inject_fault="raise",
                                   devices=2, global_batch=8)
    spec = options.base_spec(data_dir="/d", threads=2, pin_set="paper-2024")
    assert (spec.preset, spec.steps, spec.warmup, spec.timeout_s, spec.jit, spec.tf32, spec.seed, spec.per_step_sync,
            spec.device_setting, spec.fault, spec.data_dir, spec.threads, spec.pin_set, spec.devices,
            spec.global_batch) == (
        "small", 7, 0, 5.0, "on", "off", 3, False, "cpu", "raise", "/d", 2, "paper-2024", 2, 8)
    defaults = matrix.MatrixOptions(preset="paper").base_spec(data_dir="/d", threads=1)
    assert (defaults.warmup, defaults.timeout_s, defaults.steps) == (2, 7200.0, None)
