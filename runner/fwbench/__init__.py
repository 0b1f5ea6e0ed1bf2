"""fwbench: reproducible Keras 3 / Keras 2 / native PyTorch benchmarks."""

__version__ = "0.1.0"
