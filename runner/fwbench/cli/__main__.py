"""`python -m fwbench.cli`: the same as the `fwbench` command."""

from fwbench.cli.commands import main

main()
