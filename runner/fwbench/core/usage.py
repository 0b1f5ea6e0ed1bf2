"""The user-error exception every fwbench command raises for bad input (one line on stderr, exit 2).

Its own module: `python -m fwbench.cli` runs the CLI as __main__, and a class defined there would not be the
one that other modules (release_cli, k8s_cli) import and raise."""


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit 2."""
