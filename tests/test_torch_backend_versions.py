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
        set_num_threads=lambda n: None,
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
        get_float32_matmul_precision=precision, set_num_threads=lambda n: None)
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
                     "tf32_effective": False}


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


def test_new_api_tf32_policy_uses_the_new_api_only():
    torch = new_api_torch()
    cpu_backend(torch).configure(1, "off")
    assert torch.backends.fp32_precision == "ieee"


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
