"""Write a file so that readers see the old content or the new, never a half-written one.

Plain Python, for the runner and the aggregator: a temporary file in the same folder (`.<name>.<random>.tmp`,
which readers of a results folder skip), renamed over the target; the folder is made if missing.
The file gets the permissions a plain open() would give it (mkstemp's are owner-only): what fwbench writes
this way (release records, verification reports, result rows, shared data) is meant for others to read.
fsync=True also flushes the file to disk before the rename, so that a crash right after it leaves the new
content, not an empty file (result rows ask for it).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


def write_atomically(path: Path, payload: str | bytes, *, fsync: bool = False) -> None:
    """Write `payload` (text as UTF-8) to `path` atomically."""
    data = payload.encode() if isinstance(payload, str) else payload
    write_atomically_with(path, lambda temp: temp.write_bytes(data), fsync=fsync)


def write_atomically_with(path: Path, write: Callable[[Path], object], *, fsync: bool = False) -> None:
    """Have `write` write the content to the temporary path it is given (e.g. pyarrow's write_table), then put
    that file in place of `path` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    temp = Path(name)
    try:
        write(temp)
        if fsync:
            with open(temp, "rb") as f:
                os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
