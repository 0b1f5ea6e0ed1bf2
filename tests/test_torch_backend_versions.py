"""TorchBackend on the torch releases both pin sets install, without torch: each test hands the backend a
stand-in `torch` that has exactly the attributes of that release's API (torch 2.2: legacy TF32 flags only,
no CUDA-graph skip counter; torch >= 2.9: the `fp32_precision` API and the counter)."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from fwbench.harness import backends
from fwbench.harness.backends import TorchBackend


def legacy_torch(matmul_tf32=False, cudnn_tf32=True, precision="highest"):
    """torch 2.2's TF32 state: `allow_tf32` flags and the matmul precision string, nothing else."""
    state = {"precision": precision}
    torch = SimpleNamespace(
        backends=SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=matmul_tf32)),
                                 cudnn=SimpleNamespace(allow_tf32=cudnn_tf32)),
        get_float32_matmul_precision=lambda: state["precision"],
        set_float32_matmul_precision=lambda value: state.update(precision=value),
        set_num_threads=lambda n: None, get_num_threads=lambda: 1,
    )
    return torch, state


def new_api_torch(matmul="none", conv="tf32"):
    """torch >= 2.9 after a library set TF32 through the new API: reading the legacy flags raises."""

    class Raises:
        @property
        def allow_tf32(self):
            raise RuntimeError("mix of the legacy and new APIs")

    matmul_node, cudnn_node = Raises(), Raises()
    matmul_node.fp32_precision = matmul
    cudnn_node.conv = SimpleNamespace(fp32_precision=conv)

    def precision():
        raise RuntimeError("mix of the legacy and new APIs")

    torch = SimpleNamespace(
        backends=SimpleNamespace(fp32_precision="none", cuda=SimpleNamespace(matmul=matmul_node), cudnn=cudnn_node),
        get_float32_matmul_precision=precision, set_num_threads=lambda n: None, get_num_threads=lambda: 1)
    return torch


def cpu_backend(torch) -> TorchBackend:
    backend = object.__new__(TorchBackend)  # __init__ would import the real torch
    backend.torch, backend.device, backend.on_gpu = torch, "cpu", False
    return backend


def test_torch_2_2_state_is_read_from_the_legacy_flags():
    torch, _ = legacy_torch(matmul_tf32=False, cudnn_tf32=True)
    state = cpu_backend(torch).precision_state()
    # cudnn's flag defaults to True on torch 2.2: recorded, not left empty for want of the new API.
    assert state == {"tf32_matmul": False, "tf32_conv": True, "matmul_precision": "highest",
                     "tf32_effective": False, "tf32_conv_effective": False}


@pytest.mark.parametrize("setting, flags, precision", [("on", True, "high"), ("off", False, "highest")])
def test_torch_2_2_tf32_policy_sets_the_legacy_flags(setting, flags, precision):
    torch, state = legacy_torch(matmul_tf32=not flags, cudnn_tf32=not flags)
    backend = cpu_backend(torch)
    backend.configure(1, setting)
    assert torch.backends.cuda.matmul.allow_tf32 is flags and torch.backends.cudnn.allow_tf32 is flags
    assert state["precision"] == precision
    assert not hasattr(torch.backends, "fp32_precision")  # nothing of the new API is invented


def test_new_api_state_never_touches_the_legacy_flags():
    state = cpu_backend(new_api_torch(matmul="ieee", conv="tf32")).precision_state()
    assert state["tf32_matmul"] is False and state["tf32_conv"] is True
    assert state["matmul_precision"] == "fp32_precision=ieee"


class MixedApis(RuntimeError):
    pass


class Torch214Precision:
    """torch 2.14's two TF32 states as its Context keeps them (aten/src/ATen/Context.cpp; checked against the
    real torch 2.14 by tests/test_torch_precision.py): the legacy float32 matmul precision and cuDNN flag, and
    the new per-op `fp32_precision` leaves, each resolved through its backend's "all" and then the global one.
    A legacy read raises when the two disagree; the legacy setters set the leaves too."""

    def __init__(self):
        self.legacy_matmul = "highest"
        self.legacy_cudnn = True
        self.leaves = {("generic", "all"): "none", ("cuda", "all"): "none", ("cuda", "matmul"): "none",
                       ("cuda", "conv"): "none", ("cuda", "rnn"): "none"}

    def resolve(self, backend: str, op: str) -> str:
        for key in ((backend, op), (backend, "all"), ("generic", "all")):
            if self.leaves[key] != "none":
                return self.leaves[key]
        # Nothing set anywhere: cuDNN's ops follow the legacy flag, which defaults to True.
        return "tf32" if op in ("conv", "rnn") and self.legacy_cudnn else "none"

    def legacy_matmul_tf32(self) -> bool:
        new = self.resolve("cuda", "matmul") == "tf32"
        if (self.legacy_matmul != "highest") != new:
            raise MixedApis("you have used mix of the legacy and new APIs to set the TF32 status for cublas matmul")
        return new

    def matmul_precision(self) -> str:
        if self.resolve("cuda", "matmul") == "tf32" and self.legacy_matmul == "highest":
            raise MixedApis("checking the matmul precision without a specific backend: mix of the APIs")
        return self.legacy_matmul

    def legacy_cudnn_tf32(self) -> bool:
        conv, rnn = (self.resolve("cuda", op) == "tf32" for op in ("conv", "rnn"))
        if not conv == rnn == self.legacy_cudnn:
            raise MixedApis("checking whether allow_tf32 is enabled for cuDNN: mix of the legacy and new APIs")
        return self.legacy_cudnn

    def set_legacy_matmul(self, tf32: bool) -> None:
        self.legacy_matmul = "high" if tf32 else "highest"
        self.leaves["cuda", "matmul"] = "tf32" if tf32 else "ieee"

    def set_matmul_precision(self, value: str) -> None:
        self.set_legacy_matmul(value != "highest")
        self.legacy_matmul = value

    def set_legacy_cudnn(self, tf32: bool) -> None:
        self.legacy_cudnn = tf32
        self.leaves["cuda", "conv"] = self.leaves["cuda", "rnn"] = "tf32" if tf32 else "none"


def torch_2_14():
    """A stand-in torch with torch 2.14's TF32 API over a Torch214Precision state."""
    state = Torch214Precision()

    def node(legacy_get=None, legacy_set=None, leaf=None):
        class Node:
            def __getattr__(self, name):
                if name == "allow_tf32" and legacy_get:
                    return legacy_get()
                if name == "fp32_precision" and leaf:
                    return state.resolve(*leaf)
                raise AttributeError(name)

            def __setattr__(self, name, value):
                if name == "allow_tf32" and legacy_set:
                    return legacy_set(bool(value))
                if name == "fp32_precision" and leaf:
                    state.leaves[leaf] = value
                    return None
                raise AttributeError(name)
        return Node()

    cudnn = node(state.legacy_cudnn_tf32, state.set_legacy_cudnn, ("cuda", "all"))
    object.__setattr__(cudnn, "conv", node(leaf=("cuda", "conv")))
    object.__setattr__(cudnn, "rnn", node(leaf=("cuda", "rnn")))
    backends_ = node(leaf=("generic", "all"))
    object.__setattr__(backends_, "cuda", SimpleNamespace(
        matmul=node(state.legacy_matmul_tf32, state.set_legacy_matmul, ("cuda", "matmul"))))
    object.__setattr__(backends_, "cudnn", cudnn)
    torch = SimpleNamespace(backends=backends_, get_float32_matmul_precision=state.matmul_precision,
                            set_float32_matmul_precision=state.set_matmul_precision, set_num_threads=lambda n: None,
                            get_num_threads=lambda: 1,
                            cuda=SimpleNamespace(get_device_capability=lambda: (8, 0),
                                                 reset_peak_memory_stats=lambda device=None: None))
    return torch, state


def gpu_backend(torch) -> TorchBackend:
    """A TorchBackend on a mocked Ampere GPU (the CUDA boundary is the stand-in torch's `cuda`)."""
    backend = object.__new__(TorchBackend)
    backend.torch, backend.device, backend.on_gpu, backend._replay_counter = torch, "cuda", True, None
    return backend


def every_read(torch) -> dict:
    """Every TF32 read a library may make, legacy (Inductor) and new (transformers, fwbench): none may raise."""
    b = torch.backends
    return {"legacy_matmul": b.cuda.matmul.allow_tf32, "legacy_cudnn": b.cudnn.allow_tf32,
            "matmul_precision": torch.get_float32_matmul_precision(),
            "new_matmul": b.cuda.matmul.fp32_precision, "new_conv": b.cudnn.conv.fp32_precision,
            "new_rnn": b.cudnn.rnn.fp32_precision}


def test_the_model_of_torch_2_14_raises_where_torch_does():
    """The regression: a global new-API setting (what fwbench set before, and what the Trainer sets) makes the
    legacy reads raise."""
    torch, _ = torch_2_14()
    torch.backends.fp32_precision = "tf32"
    with pytest.raises(MixedApis):
        torch.backends.cuda.matmul.allow_tf32
    torch, _ = torch_2_14()
    torch.backends.fp32_precision = "ieee"
    with pytest.raises(MixedApis):
        torch.backends.cudnn.allow_tf32


@pytest.mark.parametrize("setting", ["default", "on", "off"])
@pytest.mark.parametrize("compiled", [False, True])
def test_no_tf32_read_raises_after_configure_and_the_trainers_own_switch(setting, compiled):
    """After fwbench's setting, then what TrainingArguments does with the tf32 fwbench gives it (transformers'
    enable_tf32 sets the global new API, torch >= 2.9), every legacy and new read succeeds, and they agree."""
    torch, _ = torch_2_14()
    backend = gpu_backend(torch)
    backend.configure(1, setting)
    tf32, why = backend.trainer_tf32(setting, compiled=compiled)
    assert why
    # Left None, TrainingArguments(torch_compile=True) on an Ampere GPU would switch TF32 on by itself.
    assert tf32 is not None or not compiled
    if tf32 is not None:
        torch.backends.fp32_precision = "tf32" if tf32 else "ieee"  # transformers' enable_tf32(tf32)
    reads = every_read(torch)
    assert reads["legacy_matmul"] == (reads["new_matmul"] == "tf32") == (reads["matmul_precision"] != "highest")
    assert reads["legacy_cudnn"] == (reads["new_conv"] == "tf32") == (reads["new_rnn"] == "tf32")
    state = backend.precision_state()
    assert state["tf32_matmul"] is reads["legacy_matmul"] and state["tf32_conv"] is reads["legacy_cudnn"]
    expected = {"on": (True, True), "off": (False, False),
                # default: PyTorch's own (fp32 matmuls, TF32 convolutions), unless the compiled Trainer
                # switches TF32 on, as it does by itself
                "default": (True, True) if compiled else (False, True)}[setting]
    assert (state["tf32_effective"], state["tf32_conv_effective"]) == expected


def test_tf32_off_reaches_convolutions():
    torch, _ = torch_2_14()
    backend = gpu_backend(torch)
    assert backend.precision_state()["tf32_conv"] is True  # cuDNN convolutions default to TF32
    backend.configure(1, "off")
    state = backend.precision_state()
    assert state["tf32_conv"] is False and state["tf32_conv_effective"] is False
    assert torch.backends.cudnn.conv.fp32_precision == "ieee" and torch.backends.cudnn.allow_tf32 is False


def test_trainer_gets_tf32_true_only_where_it_is_valid():
    """transformers raises on TrainingArguments(tf32=True) on a CPU or a pre-Ampere GPU."""
    torch, _ = legacy_torch()
    cpu = cpu_backend(torch)
    assert cpu.trainer_tf32("on", compiled=True)[0] is None
    assert cpu.trainer_tf32("default", compiled=True)[0] is None
    assert cpu.trainer_tf32("off", compiled=False)[0] is False
    torch_volta, _ = torch_2_14()
    torch_volta.cuda.get_device_capability = lambda: (7, 0)
    assert gpu_backend(torch_volta).trainer_tf32("on", compiled=True)[0] is None
    with pytest.raises(ValueError):
        cpu.trainer_tf32("maybe", compiled=False)


def fake_inductor(monkeypatch, **cudagraph_utils):
    torch = types.ModuleType("torch")
    inductor = types.ModuleType("torch._inductor")
    utils = types.ModuleType("torch._inductor.cudagraph_utils")
    utils.__dict__.update(cudagraph_utils)
    inductor.cudagraph_utils = utils
    torch._inductor = inductor
    for name, module in (("torch", torch), ("torch._inductor", inductor),
                         ("torch._inductor.cudagraph_utils", utils)):
        monkeypatch.setitem(sys.modules, name, module)


def test_cudagraph_skips_are_counted_where_torch_counts_them(monkeypatch):
    fake_inductor(monkeypatch, log_cudagraph_skip_and_bump_counter=lambda msg: None)
    assert backends._counts_cudagraph_skips() is True


def test_cudagraph_skips_are_unknown_on_a_torch_without_the_counter(monkeypatch):
    fake_inductor(monkeypatch)  # a cudagraph_utils without the counting helper
    assert backends._counts_cudagraph_skips() is False
    for name in ("torch", "torch._inductor", "torch._inductor.cudagraph_utils"):
        monkeypatch.setitem(sys.modules, name, None)  # torch 2.2 has no cudagraph_utils at all
    assert backends._counts_cudagraph_skips() is False


@pytest.mark.parametrize(("had", "asked", "calls"), [(2, 2, []), (2, 1, [1]), (1, 2, [2])])
def test_configure_sets_torchs_thread_count_only_where_it_changes(had, asked, calls):
    """torch.set_num_threads also turns MKL's dynamic threading off, even at the count torch already had: a
    whole-machine tiny CPU cell (2 threads, torch's own default here) ran 7-9% slower than the same process left alone
    (docs/development.md). configure() leaves an unchanged count alone; a cell given fewer cores still gets its
    count."""
    made = []
    torch = SimpleNamespace(get_num_threads=lambda: had, set_num_threads=made.append)
    backend = object.__new__(TorchBackend)  # __init__ would import the real torch
    backend.torch, backend.device, backend.on_gpu = torch, "cpu", False
    backend.configure(asked, "published")
    assert made == calls
