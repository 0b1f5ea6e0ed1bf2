"""Segment Anything (KerasHub: ViTDetBackbone + SAMPromptEncoder + SAMMaskDecoder -> SAMBackbone
-> SAMImageSegmenter; KerasCV 0.8.2's SAM classes where KerasCV is the model library: Keras 2, and Keras 3.0.5
in the paper-2024 pin set), random weights, sizes from fwbench.core.models.

fit: Adam + MSE training of the ViTDet image encoder alone, towards a fixed image embedding (as published;
fitting the whole segmenter is not implemented by Keras). predict: the full segmenter's `predict` on the
images with their two point prompts.
"""

from __future__ import annotations

from fwbench.workloads.keras.common import (KERAS_HUB, FitCell, PredictCell, check_stack, compile_regression,
                                            data_parallel, report_model, set_precision_policy)

CELLS = {"fit": FitCell, "predict": PredictCell}


def _shared_sizes(arch) -> tuple[dict, dict]:
    """Arguments KerasHub's and KerasCV's prompt encoder and mask decoder name alike."""
    prompt = dict(image_embedding_size=(arch.grid, arch.grid), input_image_size=(arch.image_size, arch.image_size))
    heads = dict(num_multimask_outputs=3, iou_head_depth=3, iou_head_hidden_dim=256)
    return prompt, heads


def _keras_hub_sam(arch):
    import keras_hub

    encoder = keras_hub.models.ViTDetBackbone(
        hidden_size=arch.embed_dim, num_layers=arch.depth, intermediate_dim=4 * arch.embed_dim,
        num_heads=arch.heads, global_attention_layer_indices=list(arch.global_attn_indexes),
        image_shape=(arch.image_size, arch.image_size, 3), patch_size=arch.patch_size,
        num_output_channels=arch.prompt_dim, window_size=arch.window_size)

    def segmenter():
        prompt, heads = _shared_sizes(arch)
        backbone = keras_hub.models.SAMBackbone(
            image_encoder=encoder,
            prompt_encoder=keras_hub.layers.SAMPromptEncoder(hidden_size=arch.prompt_dim, mask_in_channels=16,
                                                             **prompt),
            mask_decoder=keras_hub.layers.SAMMaskDecoder(
                hidden_size=arch.prompt_dim, num_layers=arch.decoder_depth, intermediate_dim=arch.decoder_mlp_dim,
                num_heads=arch.decoder_heads, embedding_dim=arch.prompt_dim, **heads))
        return keras_hub.models.SAMImageSegmenter(backbone=backbone, preprocessor=None)

    return encoder, segmenter


def _keras_cv_sam(arch):
    import keras_cv

    encoder = keras_cv.models.ViTDetBackbone(
        include_rescaling=False, input_shape=(arch.image_size, arch.image_size, 3), patch_size=arch.patch_size,
        embed_dim=arch.embed_dim, depth=arch.depth, mlp_dim=4 * arch.embed_dim, num_heads=arch.heads,
        out_chans=arch.prompt_dim, window_size=arch.window_size,
        global_attention_indices=list(arch.global_attn_indexes))

    def segmenter():
        prompt, heads = _shared_sizes(arch)
        transformer = keras_cv.models.TwoWayTransformer(
            depth=arch.decoder_depth, embed_dim=arch.prompt_dim, num_heads=arch.decoder_heads,
            mlp_dim=arch.decoder_mlp_dim)
        return keras_cv.models.SegmentAnythingModel(
            backbone=encoder,
            prompt_encoder=keras_cv.models.SAMPromptEncoder(embed_dim=arch.prompt_dim, mask_in_chans=16, **prompt),
            mask_decoder=keras_cv.models.SAMMaskDecoder(transformer_dim=arch.prompt_dim, transformer=transformer,
                                                        **heads))

    return encoder, segmenter


def build(ctx):
    check_stack(ctx)
    set_precision_policy(ctx)
    make = _keras_hub_sam if KERAS_HUB else _keras_cv_sam
    if ctx.kind == "fit":
        with data_parallel(ctx):  # --devices N: the encoder's variables are made, and it is compiled, in its scope
            encoder, _ = make(ctx.arch)
            report_model(ctx, encoder)
            compile_regression(ctx, encoder)
        arrays = ctx.global_arrays()  # all devices' rows (the shared batch itself on one device)
        return FitCell(encoder, arrays["images"], arrays["target_embeddings"], ctx.total_steps, ctx=ctx)

    _, segmenter = make(ctx.arch)
    images = ctx.arrays["images"]
    model = segmenter()
    report_model(ctx, model)
    model.compile(jit_compile=ctx.jit_compile)
    inputs = {"images": images, "points": ctx.arrays["points"],
              "labels": ctx.arrays["point_labels"].astype("float32")}
    return PredictCell(model, inputs, ctx.total_steps)
