"""Another process, by pid, as Linux's /proc shows it: which there are, whether one runs, its command line, name and
CPU ticks, a variable of its environment (for the watchers that outlive or wait on others, and the contention
probe): the one reader of another process's /proc."""

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


def pids() -> list[int]:
    """Every process visible here (all of the host's, outside a container; none where /proc cannot be read)."""
    try:
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return []


def command_line(pid: int) -> list[bytes] | None:
    """Process `pid`'s argv; None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return None


def stat(pid: int) -> tuple[str, list[str]] | None:
    """/proc/PID/stat as (its command name, the fields after it: the first is its state); None where it cannot be
    read. The name is read between the first "(" and the last ")": it may hold either."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    head, closing, tail = text.rpartition(")")
    if not closing:
        return None
    return head[head.find("(") + 1:], tail.split()


def stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (the first is its state); None where it cannot be read."""
    found = stat(pid)
    return None if found is None else found[1]


def cpu_ticks(pid: int) -> int | None:
    """CPU clock ticks process `pid` has used, all its threads (utime + stime); None once it has ended."""
    fields = stat_fields(pid)
    return None if fields is None else ticks_of(fields)


def ticks_of(fields: list[str]) -> int:
    """utime + stime from stat's fields after the command name."""
    return int(fields[11]) + int(fields[12])


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
