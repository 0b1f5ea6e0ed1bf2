"""The user-error exception every fwbench command raises for bad input (one line on stderr, exit 2).

In core, so that every layer can raise it (the CLI's main() catches it, whichever module raised it)."""


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit 2."""
