"""MobileNetV2 from keras.applications (weights=None: random weights, no download) at 96x96, width 0.35, 10
classes, with its PyTorch twin, torchvision's MobileNetV2 at the same width: the same layers and the same
trainable parameters.

    fwbench run --model examples/mobilenet_v2.py --batch 16 --out results/mobilenet

The contract is docs/your-model.md. Frameworks are imported inside the functions: this file is imported in each
stack's own environment, and native-torch's has no Keras, the JAX and TensorFlow stacks' no PyTorch.
"""

SIZE, WIDTH, CLASSES = 96, 0.35, 10


def build_model():
    import keras

    # classifier_activation=None: logits, as the twin's classifier gives.
    return keras.applications.MobileNetV2(input_shape=(SIZE, SIZE, 3), alpha=WIDTH, weights=None, classes=CLASSES,
                                          classifier_activation=None)


def keras_loss():
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def make_inputs(batch_size, rng):
    # Images as Keras takes them, NHWC; the twin transposes them to NCHW itself, inside its step.
    x = rng.standard_normal((batch_size, SIZE, SIZE, 3), dtype="float32")
    y = rng.integers(0, CLASSES, size=(batch_size,), dtype="int32")
    return x, y


def build_torch_model():
    from torch import nn
    from torchvision.models import mobilenet_v2

    class ChannelsLast(nn.Module):
        """torchvision's MobileNetV2 on the NHWC images Keras reads."""

        def __init__(self):
            super().__init__()
            # dropout=0: Keras's MobileNetV2 has no dropout before its classifier.
            self.net = mobilenet_v2(weights=None, width_mult=WIDTH, num_classes=CLASSES, dropout=0.0)

        def forward(self, x):
            return self.net(x.permute(0, 3, 1, 2))

    return ChannelsLast()


def torch_loss(outputs, targets):
    from torch.nn import functional

    return functional.cross_entropy(outputs, targets)
