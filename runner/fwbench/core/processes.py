"""Whether a process is still running, by pid (Linux's /proc), for the watchers that outlive or wait on others."""

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
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
