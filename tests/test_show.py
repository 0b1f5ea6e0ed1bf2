"""`fwbench show STACK TASK`: the timed call, files and settings of one cell, from the data of docs/stacks.md."""

from __future__ import annotations

import sys

import pytest

from fwbench.cli import stackdoc
from fwbench.cli.commands import main
from fwbench.core import registry


def fwbench(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["fwbench", *args])
    try:
        main()
        code = 0
    except SystemExit as done:
        code = done.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("stack_id, task_id, preset", [("native-torch", "bert-fit", "paper"),
                                                       ("keras3-jax", "gemma-generate-bs1", "tiny")])
def test_show_prints_the_timed_call_files_and_settings_of_the_stacks_md_table(monkeypatch, capsys, stack_id, task_id,
                                                                              preset):
    code, out, _err = fwbench(monkeypatch, capsys, "show", stack_id, task_id, "--preset", preset)
    stack, task = registry.get_stack(stack_id), registry.get_task(task_id)
    entry = stackdoc.entry(stack, task)
    lines = out.splitlines()
    assert code == 0
    assert f"timed call: {entry.cell.timed}" in lines
    assert all(f"  {path}" in lines for path in entry.files) and "  runner/fwbench/harness/clock.py" in lines
    assert f"batch size: {task.batch[preset]}" in lines
    assert any(line.startswith(f"steps: {registry.default_steps(task_id, preset)} timed") for line in lines)
    assert f"compile modes: {', '.join(stack.compile_modes)}" in lines
    assert any(line.startswith("jit_compile: True") for line in lines) == (stack.family == "keras")


def test_show_says_why_an_unsupported_cell_times_nothing(monkeypatch, capsys):
    code, out, _err = fwbench(monkeypatch, capsys, "show", "keras2-tensorflow", "gemma-fit")
    assert code == 0 and "timed call: nothing, an unsupported row: KerasNLP 0.8.2 GemmaBackbone requires Keras 3" in out


@pytest.mark.parametrize("args, message", [(["nope", "bert-fit"], "unknown stack 'nope'"),
                                           (["native-torch", "bert-fly"], "unknown task 'bert-fly'"),
                                           (["native-torch", "bert-fit", "--preset", "huge"], "unknown preset 'huge'")])
def test_show_of_an_unknown_cell_is_one_line_and_exit_2(monkeypatch, capsys, args, message):
    code, out, err = fwbench(monkeypatch, capsys, "show", *args)
    assert code == 2 and err.splitlines() == [err.strip()] and message in err and out == ""
