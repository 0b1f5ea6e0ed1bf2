"""The causal-LM recipe shared by Gemma and Mistral (HF Transformers + PEFT), as published:
fit = Trainer on token ids with rank-4 LoRA on q_proj/v_proj in bfloat16 (--precision: the whole model in float16
under fp16, float32 under fp32/tf32; never autocast on top);
generate = one whole greedy `generate()` call producing exactly `new_tokens` tokens.
"""

from __future__ import annotations

import contextlib
import copy

import torch

from fwbench.workloads import StepCell
from fwbench.workloads.torch.common import report_model, seed_weights, tensor, torch_dtype
from fwbench.workloads.torch.trainer import TrainerCell


def config_kwargs(arch) -> dict:
    """The HF config arguments Gemma and Mistral share (each adds its own token ids and extras)."""
    return dict(vocab_size=arch.vocab_size, hidden_size=arch.hidden, num_hidden_layers=arch.layers,
                num_attention_heads=arch.heads, num_key_value_heads=arch.kv_heads, head_dim=arch.head_dim,
                intermediate_size=arch.intermediate, max_position_embeddings=arch.max_positions, pad_token_id=0)


def check_attention_widths(model, arch) -> None:
    """Fail unless the built attention has the preset's head widths: transformers releases before
    MistralConfig took `head_dim` (4.38 among them) silently use hidden / heads instead."""
    attention = model.model.layers[0].self_attn
    built = (attention.q_proj.out_features, attention.k_proj.out_features)
    wanted = (arch.heads * arch.head_dim, arch.kv_heads * arch.head_dim)
    if built != wanted:
        raise ValueError(f"attention projections are {built} wide, the preset asks for {wanted}: this "
                         "transformers ignores head_dim for this model")


class GenerateCell(StepCell):
    """One greedy generate() call; checks it produced exactly new_tokens tokens."""

    kinds = ("generate",)
    timed = "model.generate(): one whole greedy generate call producing exactly new_tokens tokens"

    def __init__(self, ctx, model, prompt: torch.Tensor, mask: torch.Tensor, new_tokens: int):
        self.ctx, self.model, self.prompt, self.mask, self.new_tokens = ctx, model, prompt, mask, new_tokens

    @torch.no_grad()
    def step(self):
        output = self.model.generate(
            input_ids=self.prompt, attention_mask=self.mask, max_new_tokens=self.new_tokens,
            min_new_tokens=self.new_tokens, do_sample=False, pad_token_id=0)
        generated = output.shape[1] - self.prompt.shape[1]
        if generated != self.new_tokens:
            raise RuntimeError(f"generate produced {generated} new tokens, expected {self.new_tokens}")
        self.ctx.report(tokens_generated=generated, tokenize_in_step=False)
        return output


@contextlib.contextmanager
def created_on(device: str, dtype: torch.dtype):
    """Parameters are created where they run, in the dtype they run in: a 7B model built in fp32 on the host and
    then cast would need about 34 GB of host memory and minutes of CPU initialisation per cell (the Keras stacks
    build theirs in bfloat16 too). Random initialisation is the same either way; only where it happens differs."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(previous)


def build_causal_lm(ctx, model_class, config):
    device, spec = ctx.backend.device, ctx.spec
    # A private copy per model: Trainer flips use_cache on the config it sees. The .to() keeps anything created
    # with an explicit dtype (buffers) as the published recipe had it: the whole model in bfloat16.
    dtype = torch_dtype(ctx.model_dtype)  # bfloat16 as published; float16 (fp16) or float32 (fp32, tf32)
    seed_weights(ctx)
    with created_on(device, dtype):
        model = model_class(copy.deepcopy(config))
    model = model.to(device=device, dtype=dtype)
    check_attention_widths(model, ctx.arch)
    # A fit reads the global batch (all ranks' rows; the Trainer gives each rank its share).
    arrays = ctx.global_arrays() if ctx.kind == "fit" else ctx.arrays
    token_ids = tensor(arrays["token_ids"], "cpu", torch.long)
    padding_mask = tensor(arrays["padding_mask"], "cpu", torch.long)

    if ctx.kind == "fit":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                 task_type="CAUSAL_LM"))
        report_model(ctx, model)
        ctx.report(seq_len=token_ids.shape[1])
        # Next-token loss: HF shifts labels inside the model.
        batch = {"input_ids": token_ids, "attention_mask": padding_mask, "labels": token_ids.clone()}
        return TrainerCell(ctx, model, batch)

    model.eval()
    report_model(ctx, model)
    if spec.compile_mode != "none":
        # generate() calls self.forward: compiling the module object would bypass this path.
        model.forward = torch.compile(model.forward, mode=spec.compile_mode)
        ctx.report(compiled_target="model.forward (inside generate)")
    prompt = token_ids.to(device)
    ctx.report(prompt_len=prompt.shape[1])
    return GenerateCell(ctx, model, prompt, padding_mask.to(device), ctx.shapes.new_tokens)
