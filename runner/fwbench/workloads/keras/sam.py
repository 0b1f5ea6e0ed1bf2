"""Segment Anything (KerasHub on Keras 3: ViTDetBackbone + SAMPromptEncoder + SAMMaskDecoder -> SAMBackbone
-> SAMImageSegmenter; KerasCV 0.8.2's SAM classes on Keras 2), random weights, sizes from the registry.

fit: Adam + MSE training of the ViTDet image encoder alone, towards a fixed image embedding (as published;
fitting the whole segmenter is not implemented by Keras). predict: the full segmenter's `predict` on the
images with their two point prompts.
"""

from __future__ import annotations

from fwbench.workloads.keras.common import (JIT_COMPILE, KERAS3, FitCell, PredictCell, compile_regression,
                                            report_model)


def _keras3_sam(arch, size, grid):
    import keras_hub

    encoder = keras_hub.models.ViTDetBackbone(
        hidden_size=arch["embed_dim"], num_layers=arch["depth"], intermediate_dim=4 * arch["embed_dim"],
        num_heads=arch["heads"], global_attention_layer_indices=arch["global_attn_indexes"],
        image_shape=(size, size, 3), patch_size=arch["patch_size"], num_output_channels=arch["prompt_dim"],
        window_size=arch["window_size"])

    def segmenter():
        prompt_encoder = keras_hub.layers.SAMPromptEncoder(
            hidden_size=arch["prompt_dim"], image_embedding_size=(grid, grid), input_image_size=(size, size),
            mask_in_channels=16)
        mask_decoder = keras_hub.layers.SAMMaskDecoder(
            hidden_size=arch["prompt_dim"], num_layers=arch["decoder_depth"],
            intermediate_dim=arch["decoder_mlp_dim"], num_heads=arch["decoder_heads"],
            embedding_dim=arch["prompt_dim"], num_multimask_outputs=3, iou_head_depth=3, iou_head_hidden_dim=256)
        backbone = keras_hub.models.SAMBackbone(image_encoder=encoder, prompt_encoder=prompt_encoder,
                                                mask_decoder=mask_decoder)
        return keras_hub.models.SAMImageSegmenter(backbone=backbone, preprocessor=None)

    return encoder, segmenter


def _keras2_sam(arch, size, grid):
    import keras_cv

    encoder = keras_cv.models.ViTDetBackbone(
        include_rescaling=False, input_shape=(size, size, 3), patch_size=arch["patch_size"],
        embed_dim=arch["embed_dim"], depth=arch["depth"], mlp_dim=4 * arch["embed_dim"], num_heads=arch["heads"],
        out_chans=arch["prompt_dim"], window_size=arch["window_size"],
        global_attention_indices=arch["global_attn_indexes"])

    def segmenter():
        prompt_encoder = keras_cv.models.SAMPromptEncoder(
            embed_dim=arch["prompt_dim"], image_embedding_size=(grid, grid), input_image_size=(size, size),
            mask_in_chans=16)
        mask_decoder = keras_cv.models.SAMMaskDecoder(
            transformer_dim=arch["prompt_dim"],
            transformer=keras_cv.models.TwoWayTransformer(
                depth=arch["decoder_depth"], embed_dim=arch["prompt_dim"], num_heads=arch["decoder_heads"],
                mlp_dim=arch["decoder_mlp_dim"]),
            num_multimask_outputs=3, iou_head_depth=3, iou_head_hidden_dim=256)
        return keras_cv.models.SegmentAnythingModel(backbone=encoder, prompt_encoder=prompt_encoder,
                                                    mask_decoder=mask_decoder)

    return encoder, segmenter


def build(ctx):
    arch = ctx.arch
    size, grid = arch["image_size"], arch["image_size"] // arch["patch_size"]
    encoder, segmenter = (_keras3_sam if KERAS3 else _keras2_sam)(arch, size, grid)
    images = ctx.arrays["images"]

    if ctx.workload.task.kind == "fit":
        report_model(ctx, encoder, "float32")
        compile_regression(encoder)
        return FitCell(encoder, images, ctx.arrays["target_embeddings"], ctx.total_steps)

    model = segmenter()
    report_model(ctx, model, "float32")
    model.compile(jit_compile=JIT_COMPILE)
    inputs = {"images": images, "points": ctx.arrays["points"],
              "labels": ctx.arrays["point_labels"].astype("float32")}
    return PredictCell(model, inputs, ctx.total_steps)
