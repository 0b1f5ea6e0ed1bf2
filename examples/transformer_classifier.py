"""A small Transformer text classifier: token and position embeddings, 2 encoder blocks (4 heads, post-norm, as
torch's nn.TransformerEncoderLayer), mean pooling and a 2-class head, with its PyTorch twin built from the same
pieces (nn.Embedding, nn.MultiheadAttention, nn.Linear, nn.LayerNorm): the same trainable parameters. Its inputs
are a dict, token ids and position ids, so that both embeddings are plain lookups.

    fwbench run --model examples/transformer_classifier.py --out results/transformer

The contract is docs/your-model.md. Frameworks are imported inside the functions: this file is imported in each
stack's own environment, and native-torch's has no Keras, the JAX and TensorFlow stacks' no PyTorch.
"""

VOCAB, SEQ, DIM, HEADS, FFN, BLOCKS, CLASSES = 8000, 128, 128, 4, 256, 2, 2


def build_model():
    import keras

    tokens = keras.Input((SEQ,), dtype="int32", name="token_ids")
    positions = keras.Input((SEQ,), dtype="int32", name="position_ids")
    x = keras.layers.Embedding(VOCAB, DIM)(tokens) + keras.layers.Embedding(SEQ, DIM)(positions)
    for _ in range(BLOCKS):
        attended = keras.layers.MultiHeadAttention(HEADS, DIM // HEADS)(x, x)
        x = keras.layers.LayerNormalization(epsilon=1e-5)(x + attended)
        hidden = keras.layers.Dense(FFN, activation="relu")(x)
        x = keras.layers.LayerNormalization(epsilon=1e-5)(x + keras.layers.Dense(DIM)(hidden))
    logits = keras.layers.Dense(CLASSES)(keras.layers.GlobalAveragePooling1D()(x))
    return keras.Model({"token_ids": tokens, "position_ids": positions}, logits)


def keras_loss():
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def make_inputs(batch_size, rng):
    import numpy as np

    x = {"token_ids": rng.integers(0, VOCAB, size=(batch_size, SEQ), dtype="int32"),
         "position_ids": np.tile(np.arange(SEQ, dtype="int32"), (batch_size, 1))}
    y = rng.integers(0, CLASSES, size=(batch_size,), dtype="int32")
    return x, y


def build_torch_model():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = nn.MultiheadAttention(DIM, HEADS, batch_first=True)
            self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
            self.up, self.down = nn.Linear(DIM, FFN), nn.Linear(FFN, DIM)

        def forward(self, x):
            x = self.norm1(x + self.attention(x, x, x, need_weights=False)[0])
            return self.norm2(x + self.down(torch.relu(self.up(x))))

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens, self.positions = nn.Embedding(VOCAB, DIM), nn.Embedding(SEQ, DIM)
            self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
            self.head = nn.Linear(DIM, CLASSES)

        def forward(self, x):
            x = self.tokens(x["token_ids"]) + self.positions(x["position_ids"])
            for block in self.blocks:
                x = block(x)
            return self.head(x.mean(dim=1))

    return Classifier()


def torch_loss(outputs, targets):
    from torch.nn import functional

    return functional.cross_entropy(outputs, targets)
