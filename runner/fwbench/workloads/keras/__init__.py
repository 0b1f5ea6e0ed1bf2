"""Keras workloads: one module per model, shared by keras3-tensorflow, keras3-jax, keras3-torch and
keras2-tensorflow. The Keras major version and backend come from the stack's environment."""
