"""The harness: the only code that reads a clock, syncs a device or measures memory."""
