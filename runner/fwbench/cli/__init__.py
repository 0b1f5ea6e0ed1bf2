"""The `fwbench` command line: the Typer app (commands.py), options and errors shared by the command groups (common.py), one module per command group. Nothing below this layer imports it."""
