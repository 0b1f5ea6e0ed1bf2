"""Counts a PyTorch twin's FLOPs from the modules that run (the counting: fwbench.core.layer_flops).

After the timed window, on the module as built (never the compiled one): forward hooks on every module, one forward
on one row of the cell's inputs (eval mode, gradients on: torch's fused inference paths, which skip the submodules'
forward calls, stay off), the calls' shapes give each module's FLOPs, and the hooks go. nn.Linear, convolutions
(grouped and depthwise included) and nn.MultiheadAttention (its projections and products) are counted;
embeddings and normalisations are free; any other module with parameters of its own makes the count incomplete,
and the row then has no FLOPs.
"""

from __future__ import annotations

import torch

from fwbench.core import layer_flops

NN = torch.nn
CONVOLUTIONS = (NN.Conv1d, NN.Conv2d, NN.Conv3d)
FREE = tuple(getattr(NN, name) for name in ("Embedding", "EmbeddingBag", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
                                            "LayerNorm", "GroupNorm", "RMSNorm", "InstanceNorm1d", "InstanceNorm2d")
             if hasattr(NN, name))


class FlopProbe:
    """Counts the twin's FLOPs once the steps have run (ctx.step_cost; None, with extra.physics saying why)."""

    def __init__(self, ctx, module: torch.nn.Module):
        self.ctx, self.module = ctx, module
        ctx.after_run(self.count)

    def count(self) -> None:
        from fwbench.core import model_file

        tally, seen, handles = layer_flops.Tally(), set(), []
        inside_attention = {id(child) for m in self.module.modules() if isinstance(m, NN.MultiheadAttention)
                            for child in m.modules() if child is not m}
        counted = []
        for name, module in self.module.named_modules():
            if id(module) in inside_attention:
                continue  # counted by its attention module
            if isinstance(module, (NN.Linear, NN.MultiheadAttention) + CONVOLUTIONS):
                counted.append((name, module))
                handles.append(module.register_forward_hook(self._hook(name, tally, seen), with_kwargs=True))
            elif not isinstance(module, FREE) and any(True for _ in module.parameters(recurse=False)):
                tally.cannot_count(f"{type(module).__name__} {name or '(the model)'}")
        x, _ = model_file.split_inputs(self.ctx.arrays)
        device = next((p.device for p in self.module.parameters()), torch.device("cpu"))
        training = self.module.training
        try:
            self.module.eval()
            with torch.enable_grad():
                self.module(_one_row(x, device))
        except Exception as exc:  # the count must never fail a cell that ran
            tally.cannot_count(f"the counting call failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
        finally:
            self.module.train(training)
            for handle in handles:
                handle.remove()
        for name, module in counted:
            if name not in seen:
                tally.cannot_count(f"{type(module).__name__} {name} did not run on the counting call")
        frozen = any(not p.requires_grad for _, module in counted for p in module.parameters())
        cost, why = tally.step_cost(self.ctx.kind, 1, self.ctx.batch_size, frozen)
        self.ctx.step_cost = cost
        if why:
            self.ctx.report(extra={"physics": why})

    @staticmethod
    def _hook(name: str, tally: layer_flops.Tally, seen: set):
        def hook(module, args, kwargs, output):
            if name in seen:
                return
            seen.add(name)
            if isinstance(module, NN.MultiheadAttention):
                _note_attention(module, args, kwargs, tally)
            elif isinstance(module, NN.Linear):
                tally.add(layer_flops.dense(tuple(output.shape), module.in_features))
            else:
                weight = module.weight
                tally.add(layer_flops.conv(tuple(output.shape), weight.numel(), weight.shape[0]), convolution=True)
        return hook


def _note_attention(module: torch.nn.MultiheadAttention, args, kwargs, tally: layer_flops.Tally) -> None:
    query, key, value = (list(args) + [kwargs.get(n) for n in ("query", "key", "value")[len(args):]])[:3]
    batch_axis = 0 if module.batch_first else 1
    batch, queries = query.shape[batch_axis], query.shape[1 - batch_axis]
    keys = key.shape[1 - batch_axis]
    embed, heads = module.embed_dim, module.num_heads
    tally.add(layer_flops.dense((batch, queries, embed), embed)  # query projection
              + layer_flops.dense((batch, keys, embed), module.kdim)  # key projection
              + layer_flops.dense((batch, keys, embed), module.vdim)  # value projection
              + layer_flops.attention(batch, heads, queries, keys, embed // heads, embed // heads)
              + layer_flops.dense((batch, queries, embed), embed))  # output projection


def _one_row(x, device):
    def row(array):
        array = array[:1].astype("int64") if array.dtype.kind in "iu" else array[:1]
        return torch.from_numpy(array.copy()).to(device)
    return {name: row(array) for name, array in x.items()} if isinstance(x, dict) else row(x)
