"""Run inside the native-torch environment by tests/test_physics_crosscheck.py; prints one JSON object.

Counts the FLOPs of each tiny model's forward with torch's FlopCounterMode (matmuls, convolutions and
attention products, 2 per multiply-add: the convention of fwbench.core.physics) next to the analytic count.
Attention runs as explicit matmuls (eager attention, diffusers' AttnProcessor): FlopCounterMode does not count
the CPU's fused scaled_dot_product_attention kernel, and like must be compared with like.
"""

from __future__ import annotations

import json

import torch
from torch.utils.flop_counter import FlopCounterMode

from fwbench.core import physics
from fwbench.core.models import BERT, GEMMA, MISTRAL, SAM, STABLE_DIFFUSION

BATCH = 2


def counted(fn) -> int:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def main() -> None:
    from transformers import BertConfig, BertForSequenceClassification, GemmaConfig, GemmaForCausalLM, \
        MistralConfig, MistralForCausalLM

    from diffusers.models.attention_processor import AttnProcessor

    from fwbench.workloads.torch.causal_lm import config_kwargs
    from fwbench.workloads.torch.sam import build_sam
    from fwbench.workloads.torch.stable_diffusion import build_unet, build_vae

    torch.manual_seed(0)
    out = {}
    arch, seq = BERT.arch("tiny"), BERT.shapes["tiny"].seq_len
    bert = BertForSequenceClassification(BertConfig(
        vocab_size=arch.vocab_size, hidden_size=arch.hidden, num_hidden_layers=arch.layers,
        num_attention_heads=arch.heads, intermediate_size=arch.intermediate,
        max_position_embeddings=arch.max_positions, num_labels=arch.num_classes, attn_implementation="eager")).eval()
    ids = torch.randint(3, arch.vocab_size, (BATCH, seq))
    out["bert forward"] = (counted(lambda: bert(input_ids=ids)), BATCH * physics.bert_forward(arch, seq))

    for model, config_class, lm_class in ((GEMMA, GemmaConfig, GemmaForCausalLM),
                                          (MISTRAL, MistralConfig, MistralForCausalLM)):
        arch, seq = model.arch("tiny"), model.shapes["tiny"].seq_len
        extra = {"sliding_window": arch.sliding_window} if arch.sliding_window else {}
        lm = lm_class(config_class(**config_kwargs(arch), **extra, attn_implementation="eager")).eval()
        ids = torch.randint(3, arch.vocab_size, (BATCH, seq))
        out[f"{model.id} forward"] = (counted(lambda: lm(input_ids=ids)),
                                      BATCH * physics.causal_lm_forward(arch, seq, seq))

    arch = SAM.arch("tiny")
    sam = build_sam(arch).eval()
    images = torch.randn(BATCH, 3, arch.image_size, arch.image_size)
    out["sam image encoder"] = (counted(lambda: sam.image_encoder(images)), BATCH * physics.sam_encoder_forward(arch))

    arch = STABLE_DIFFUSION.arch("tiny")
    unet = build_unet(arch).eval()
    unet.set_attn_processor(AttnProcessor())
    latents = torch.randn(2 * BATCH, arch.latent_channels, arch.latent_size, arch.latent_size)
    context = torch.randn(2 * BATCH, arch.context_len, arch.context_dim)
    out["sd unet"] = (counted(lambda: unet(latents, 10, encoder_hidden_states=context)),
                      2 * BATCH * physics.unet_forward(arch))
    vae = build_vae(arch).eval()
    vae.set_attn_processor(AttnProcessor())
    images = torch.randn(BATCH, 3, arch.image_size, arch.image_size)
    out["sd vae encoder"] = (counted(lambda: vae.encode(images)), BATCH * physics.vae_encoder_forward(arch))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
