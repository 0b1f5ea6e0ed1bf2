"""Segment Anything (Meta's segment_anything, random weights).

fit: Adam + MSE training of the ViT image encoder alone, towards a fixed image embedding (as published).
predict: image encoder on the batch, then prompt encoder + mask decoder per image with its two point
prompts (segment_anything's own batching: its mask decoder takes one image at a time).
"""

from __future__ import annotations

import contextlib
from functools import partial

import torch
from segment_anything.modeling import (ImageEncoderViT, MaskDecoder, PromptEncoder, Sam,
                                       TwoWayTransformer)

from fwbench.workloads import StepCell
from fwbench.workloads.torch.common import (RegressionTrainStep, autocast, data_parallel, maybe_compile, nchw,
                                            report_compiled, report_model, seed_weights, tensor)


def build_sam(arch) -> Sam:
    """The same construction as segment_anything.build_sam, with every size taken from the preset."""
    return Sam(
        image_encoder=ImageEncoderViT(
            depth=arch.depth, embed_dim=arch.embed_dim, img_size=arch.image_size, mlp_ratio=4,
            norm_layer=partial(torch.nn.LayerNorm, eps=1e-6), num_heads=arch.heads,
            patch_size=arch.patch_size, qkv_bias=True, use_rel_pos=True,
            global_attn_indexes=list(arch.global_attn_indexes), window_size=arch.window_size,
            out_chans=arch.prompt_dim),
        prompt_encoder=PromptEncoder(
            embed_dim=arch.prompt_dim, image_embedding_size=(arch.grid, arch.grid),
            input_image_size=(arch.image_size, arch.image_size), mask_in_chans=16),
        mask_decoder=MaskDecoder(
            num_multimask_outputs=3,
            transformer=TwoWayTransformer(depth=arch.decoder_depth, embedding_dim=arch.prompt_dim,
                                          mlp_dim=arch.decoder_mlp_dim, num_heads=arch.decoder_heads),
            transformer_dim=arch.prompt_dim, iou_head_depth=3, iou_head_hidden_dim=256),
    )


class SegmentCell(StepCell):
    """Image encoder on the batch, then prompt encoder + mask decoder per image with its two points."""

    kinds = ("predict",)
    timed = ("sam.image_encoder(images), then sam.prompt_encoder + sam.mask_decoder per image "
             "(segment_anything's own batching); the embeddings and each image's masks are copied out of the "
             "compiled modules' outputs")

    def __init__(self, sam: Sam, images: torch.Tensor, points: torch.Tensor, labels: torch.Tensor, amp=None):
        self.sam, self.images, self.points, self.labels = sam, images, points, labels
        self.amp = amp or contextlib.nullcontext  # bf16/fp16: torch.autocast around the whole step

    @torch.no_grad()
    def step(self):
        with self.amp():
            return self._step()

    def _step(self):
        sam, points, labels = self.sam, self.points, self.labels
        # Copies (one small device copy each, in every compile mode alike): under reduce-overhead each compiled
        # module's outputs live in CUDA-graph memory that its next replay reuses, and the mask decoder runs once per
        # image, so the embeddings and the earlier masks would be overwritten before they are read.
        embeddings = sam.image_encoder(self.images).clone()
        dense_pe = sam.prompt_encoder.get_dense_pe()
        masks = []
        for index in range(embeddings.shape[0]):
            sparse, dense = sam.prompt_encoder(
                points=(points[index:index + 1], labels[index:index + 1]), boxes=None, masks=None)
            low_res_masks, _iou = sam.mask_decoder(
                image_embeddings=embeddings[index:index + 1], image_pe=dense_pe,
                sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense, multimask_output=True)
            masks.append(low_res_masks.clone())
        return torch.cat(masks)


CELLS = {"fit": RegressionTrainStep, "predict": SegmentCell}


def build(ctx):
    device, mode = ctx.backend.device, ctx.spec.compile_mode
    seed_weights(ctx)
    sam = build_sam(ctx.arch).to(device)

    if ctx.kind == "fit":
        encoder = sam.image_encoder
        report_model(ctx, encoder)
        # This rank's rows of the global batch (the shared batch itself on one device at the task's batch).
        arrays = ctx.global_arrays()
        encoder, rows = data_parallel(ctx, encoder)
        return RegressionTrainStep(ctx, encoder, tensor(nchw(arrays["images"][rows]), device),
                                   tensor(nchw(arrays["target_embeddings"][rows]), device))

    images = tensor(nchw(ctx.arrays["images"]), device)

    sam.eval()
    report_model(ctx, sam)
    # Compile the modules that run (assigning a compiled module keeps sam.<name>(...) on the compiled path).
    sam.image_encoder = maybe_compile(sam.image_encoder, mode)
    sam.mask_decoder = maybe_compile(sam.mask_decoder, mode)
    report_compiled(ctx, "image encoder + mask decoder")
    return SegmentCell(sam, images, tensor(ctx.arrays["points"], device), tensor(ctx.arrays["point_labels"], device),
                       amp=lambda: autocast(ctx, device))
