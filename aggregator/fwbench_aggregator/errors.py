"""Errors the commands turn into one line on stderr and an exit code (never a traceback)."""

from __future__ import annotations


class AggregateError(Exception):
    exit_code = 1

    def __init__(self, message: str, skipped: list | None = None) -> None:
        super().__init__(message)
        self.skipped = skipped or []  # files rejected on the way, so the caller can list them


class AggregateUsageError(AggregateError):
    """The user pointed at something that does not exist or cannot be used (exit 2)."""

    exit_code = 2


class NoResultsError(AggregateError):
    """Nothing usable to aggregate (exit 1)."""

    exit_code = 1


class StrictModeError(AggregateError):
    """--strict and at least one result file was skipped (exit 1)."""

    exit_code = 1
