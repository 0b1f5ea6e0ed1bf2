"""A small MLP classifier: 784 -> 512 -> 512 -> 10 (an MNIST-sized dense network), with its PyTorch twin.

    fwbench run --model examples/mlp.py --out results/mlp

The contract is docs/your-model.md. Frameworks are imported inside the functions: this file is imported in each
stack's own environment, and native-torch's has no Keras, the JAX and TensorFlow stacks' no PyTorch.
"""

FEATURES, HIDDEN, CLASSES = 784, 512, 10


def build_model():
    import keras

    return keras.Sequential([
        keras.Input((FEATURES,)),
        keras.layers.Dense(HIDDEN, activation="relu"),
        keras.layers.Dense(HIDDEN, activation="relu"),
        keras.layers.Dense(CLASSES),  # logits
    ])


def keras_loss():
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def make_inputs(batch_size, rng):
    x = rng.standard_normal((batch_size, FEATURES), dtype="float32")
    y = rng.integers(0, CLASSES, size=(batch_size,), dtype="int32")
    return x, y


def build_torch_model():
    from torch import nn

    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, CLASSES))


def torch_loss(outputs, targets):
    from torch.nn import functional

    return functional.cross_entropy(outputs, targets)
