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


def test_the_weights_checksum_is_one_sha256_stream_read_and_hashed_side_by_side():
    """weights_sha256 hashes each weight in a second thread while the next is read back (a 7B fit's checksum took
    27-54 s on the H200 in one loop): the digest is exactly one loop's, in order, and a failure on either side is
    raised, never a wrong or partial digest."""
    import hashlib

    import numpy as np
    import pytest

    from fwbench import workloads

    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 255, size=n, dtype=np.uint8) for n in (5, 3000, 1 << 20, 7, 1 << 16, 0)]
    weights = [("bfloat16" if i % 2 else "float32", (len(a),), a) for i, a in enumerate(arrays)]
    one_loop = hashlib.sha256()
    for dtype, shape, data in weights:
        one_loop.update(f"{dtype}{list(shape)};".encode())
        one_loop.update(data)
    assert workloads.weights_sha256(iter(weights)) == one_loop.hexdigest()
    assert workloads.weights_sha256(iter(weights[::-1])) != one_loop.hexdigest()  # order counts
    assert workloads.weights_sha256(iter([])) == hashlib.sha256().hexdigest()

    def read_back_fails():
        yield weights[0]
        raise RuntimeError("device lost")

    with pytest.raises(RuntimeError, match="device lost"):
        workloads.weights_sha256(read_back_fails())
    with pytest.raises(TypeError):  # not bytes-like: the hashing thread's error, raised here
        workloads.weights_sha256(iter([("float32", (1,), object())] + weights * 3))
