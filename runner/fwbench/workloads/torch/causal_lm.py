"""The causal-LM recipe shared by Gemma and Mistral (HF Transformers + PEFT), as published:
fit = Trainer on token ids with rank-4 LoRA on q_proj/v_proj in bfloat16;
generate = one whole greedy `generate()` call producing exactly `new_tokens` tokens.
"""

from __future__ import annotations

import copy

import torch

from fwbench.workloads.torch.common import report_model, tensor, trainer_fit


def build_causal_lm(ctx, model_class, config):
    device, spec = ctx.backend.device, ctx.spec
    # A private copy per model: Trainer flips use_cache on the config it sees.
    model = model_class(copy.deepcopy(config)).to(device=device, dtype=torch.bfloat16)
    token_ids = tensor(ctx.arrays["token_ids"], "cpu", torch.long)
    padding_mask = tensor(ctx.arrays["padding_mask"], "cpu", torch.long)

    if ctx.workload.task.kind == "fit":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                 task_type="CAUSAL_LM"))
        report_model(ctx, model, "bfloat16")
        ctx.info["seq_len"] = token_ids.shape[1]
        # Next-token loss: HF shifts labels inside the model.
        batch = {"input_ids": token_ids, "attention_mask": padding_mask, "labels": token_ids.clone()}
        return trainer_fit(ctx, model, batch)

    model.eval()
    report_model(ctx, model, "bfloat16")
    if spec.compile_mode != "none":
        # generate() calls self.forward: compiling the module object would bypass this path.
        model.forward = torch.compile(model.forward, mode=spec.compile_mode)
    new_tokens = ctx.workload.shapes["new_tokens"]
    prompt = token_ids.to(device)
    mask = padding_mask.to(device)
    ctx.info["prompt_len"] = prompt.shape[1]

    class Generate:
        @torch.no_grad()
        def step(self):
            output = model.generate(
                input_ids=prompt, attention_mask=mask, max_new_tokens=new_tokens,
                min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
            generated = output.shape[1] - prompt.shape[1]
            if generated != new_tokens:
                raise RuntimeError(f"generate produced {generated} new tokens, expected {new_tokens}")
            ctx.info["tokens_generated"] = generated
            return output

    return Generate()
