"""The facts every other layer reads: stacks, tasks and presets, pin sets, model architectures, cell identity, the result schema, cell specs, result rows, shared data, and small shared helpers.
Imports nothing else of fwbench (docs/architecture.md)."""
