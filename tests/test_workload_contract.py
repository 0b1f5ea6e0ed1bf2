"""The typed workload contract: two explicit cell kinds, module-level classes that say what they time, and
row fields that must be result columns (no framework needed)."""

from __future__ import annotations

import pytest

from fwbench.core import registry
from fwbench.core.spec import CellSpec
from fwbench.workloads import CellContext, DrivenCell, ReportError, StepCell, check_cell


class Stepper(StepCell):
    kinds = ("predict",)
    timed = "f(): one call"

    def step(self):
        return 1


class Driver(DrivenCell):
    kinds = ("fit",)
    timed = "loop(): the framework's loop"

    def drive(self, clock):
        pass


def context(stack="native-torch", task="bert-fit") -> CellContext:
    spec = CellSpec(stack=stack, task=task, preset="tiny", compile_mode=registry.get_stack(stack).compile_modes[0],
                    data_dir="/d", steps=1)
    return CellContext(spec=spec, workload=registry.workload(task, "tiny"), arrays={}, backend=None)


def test_report_accepts_result_columns_and_rejects_anything_else():
    ctx = context()
    ctx.report(tokens_generated=3, seq_len=64, params_total=10)
    assert ctx.reported == {"tokens_generated": 3, "seq_len": 64, "params_total": 10}
    with pytest.raises(ReportError, match="tokens_generatd"):
        ctx.report(tokens_generatd=3)
    assert "tokens_generatd" not in ctx.reported
    ctx.reported["x"] = 1  # a copy: cannot smuggle keys in
    assert "x" not in ctx.reported


def test_context_reads_the_definitions():
    ctx = context("keras3-torch", "gemma-generate-bs1")
    assert ctx.jit_compile is False and ctx.kind == "generate"
    assert ctx.shapes.new_tokens == registry.workload("gemma-generate-bs1", "tiny").shapes.new_tokens
    assert ctx.arch.vocab_size > 0 and context().jit_compile is None


def test_check_cell_dispatches_only_declared_cells_of_the_right_kind():
    assert isinstance(check_cell(Stepper(), {"predict": Stepper}, "predict", "m"), StepCell)
    assert isinstance(check_cell(Driver(), {"fit": Driver}, "fit", "m"), DrivenCell)

    class HasStep:  # duck-typed: no longer accepted
        def step(self):
            return 1

    with pytest.raises(TypeError, match="neither a StepCell nor a DrivenCell"):
        check_cell(HasStep(), {"predict": HasStep}, "predict", "m")
    with pytest.raises(TypeError, match="CELLS"):
        check_cell(Stepper(), {"predict": Driver}, "predict", "m")
    with pytest.raises(TypeError, match="does not serve fit"):
        check_cell(Stepper(), {"fit": Stepper}, "fit", "m")


@pytest.mark.parametrize("base, attributes, message", [
    (StepCell, {"timed": "x"}, "kinds"),
    (StepCell, {"kinds": ("train",), "timed": "x"}, "kinds"),
    (DrivenCell, {"kinds": ("fit",)}, "timed"),
    (DrivenCell, {"kinds": ("fit",), "timed": "two\nlines"}, "timed"),
])
def test_a_cell_class_must_say_what_it_serves_and_times(base, attributes, message):
    with pytest.raises(TypeError, match=message):
        type("Incomplete", (base,), dict(attributes))


def test_a_cell_must_implement_its_kind_of_call():
    NoStep = type("NoStep", (StepCell,), {"kinds": ("fit",), "timed": "x"})
    with pytest.raises(TypeError):  # abstract: a step cell without step() cannot be built
        NoStep()
