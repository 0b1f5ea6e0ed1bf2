"""The marks the report's numbers carry, defined once: plain constants, so that a stack image's `fwbench run`, which
has no pandas, can print its summary with them (fwbench.cli.commands)."""

# An estimate that includes rows measured beside other cells of their run (fwbench run --parallel).
CONCURRENT_MARK = "‡"
# A number measured only while the machine was busy: shown, but ranked and compared nowhere.
BUSY_MARK = "⚠"
