"""Another process, by pid, as Linux's /proc shows it: whether it runs, its CPU ticks, a variable of its environment
(for the watchers that outlive or wait on others, and the contention probe)."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether process `pid` runs: a zombie (dead, not yet reaped) is dead for our purpose; another user's process,
    which we may not signal, is alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = stat_fields(pid)
    return fields is None or fields[0] != "Z"


def stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (the first is its state); None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_ticks(pid: int) -> int | None:
    """CPU clock ticks process `pid` has used, all its threads (utime + stime); None once it has ended."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[11]) + int(fields[12])


def environment_variable(pid: int, name: str) -> str | None:
    """A variable of process `pid`'s environment; None where it is unset or the environment cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            variables = f.read().split(b"\0")
    except OSError:
        return None
    prefix = f"{name}=".encode()
    for variable in variables:
        if variable.startswith(prefix):
            return variable[len(prefix):].decode(errors="replace")
    return None
