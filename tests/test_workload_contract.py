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


def test_the_weights_checksum_is_a_sha256_of_its_pieces_sha256s_whoever_reads_and_hashes_them():
    """weights_sha256 hashes each 16 MiB piece of each weight on its own, on every core (a 7B fit's checksum took
    27-54 s on the H200 in one stream), and reads device weights into a few reused host buffers: the digest is the
    definition's (each weight's header, then its pieces' SHA-256s, in order) whatever the number of hashing threads
    and whether the bytes come whole or piece by piece, and a failure on either side is raised, never a partial
    digest."""
    import hashlib

    import numpy as np
    import pytest

    from fwbench import workloads
    from fwbench.workloads import checksum

    chunk = checksum.CHUNK_BYTES
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 255, size=n, dtype=np.uint8)
              for n in (5, 3000, chunk, 7, chunk + 1, 0, 2 * chunk + 3)]
    weights = [("bfloat16" if i % 2 else "float32", (len(a),), a) for i, a in enumerate(arrays)]
    definition = hashlib.sha256()
    for dtype, shape, data in weights:
        definition.update(f"{dtype}{list(shape)};".encode())
        for offset in range(0, len(data), chunk):
            definition.update(hashlib.sha256(data[offset:offset + chunk]).digest())
    expected = definition.hexdigest()

    class Reader:
        """A device weight, as the torch stacks' DeviceBytes: copied piece by piece into the buffer it is given."""
        buffers: set[int] = set()

        def __init__(self, data):
            self.data, self.nbytes = data, data.size

        def read_into(self, offset, out):
            Reader.buffers.add(out.__array_interface__["data"][0])
            out[:] = self.data[offset:offset + out.size]

    as_read = [(dtype, shape, Reader(data)) for dtype, shape, data in weights]
    for workers in (1, 2, 5):
        assert workloads.weights_sha256(iter(weights), workers=workers) == expected
        Reader.buffers.clear()
        assert workloads.weights_sha256(iter(as_read), workers=workers) == expected
        # the host memory read back stays a few reused buffers, not one per piece (7 pieces here)
        assert len(Reader.buffers) <= min(7, workers * checksum.PIECES_PER_WORKER)
    mixed = [w if i % 2 else r for i, (w, r) in enumerate(zip(weights, as_read))]
    assert workloads.weights_sha256(iter(mixed)) == expected
    assert workloads.weights_sha256(iter(weights[::-1])) != expected  # order counts
    assert workloads.weights_sha256(iter([(d, (1, n), a) for d, (n,), a in weights])) != expected  # shape counts
    assert workloads.weights_sha256(iter([])) == hashlib.sha256().hexdigest()
    whole_value = np.arange(12, dtype=np.float32).reshape(3, 4)  # any bytes-like value: its bytes in C order
    assert (workloads.weights_sha256(iter([("float32", (3, 4), whole_value)]))
            == workloads.weights_sha256(iter([("float32", (3, 4), whole_value.view(np.uint8).reshape(-1))])))

    def read_back_fails():
        yield weights[0]
        raise RuntimeError("device lost")

    class FailingReader(Reader):
        def read_into(self, offset, out):
            raise RuntimeError("copy failed")

    with pytest.raises(RuntimeError, match="device lost"):
        workloads.weights_sha256(read_back_fails())
    with pytest.raises(RuntimeError, match="copy failed"):
        workloads.weights_sha256(iter(weights[:2] + [("uint8", (9,), FailingReader(arrays[1]))]))
    with pytest.raises(TypeError):  # not bytes-like: refused, no digest
        workloads.weights_sha256(iter([("float32", (1,), object())] + weights * 3))
