"""NVML sessions: the runner, the engines and the cell ask NVML the same way.

Plain Python (pynvml is optional): a CPU machine has no pynvml or no driver, and every caller then gets None.
A reading that fails is None, never an exception: NVML never fails a cell.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

T = TypeVar("T")


class NvmlSession:
    """One nvmlInit .. nvmlShutdown around several reads (e.g. both ends of a timed window), so that a read
    costs a query, not NVML's start-up. open() says whether NVML started; query() is None when it did not or
    the query failed; close() is safe to call at any time, any number of times. Also a context manager."""

    def __init__(self):
        self.pynvml: Any = None  # the module, while the session is open

    @property
    def is_open(self) -> bool:
        return self.pynvml is not None

    def open(self) -> bool:
        if self.pynvml is not None:
            return True
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception:  # pynvml.NVMLError or ImportError: a CPU machine, or no driver in the container
            return False
        self.pynvml = pynvml
        return True

    def query(self, query: Callable[[Any], T]) -> T | None:
        """query(pynvml); None when the session is not open or the query fails."""
        if self.pynvml is None:
            return None
        try:
            return query(self.pynvml)
        except Exception:
            return None

    def close(self) -> None:
        pynvml, self.pynvml = self.pynvml, None
        if pynvml is not None:
            try:
                pynvml.nvmlShutdown()
            except Exception:
                pass

    def __enter__(self) -> "NvmlSession":
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def nvml_query(query: Callable[[Any], T]) -> T | None:
    """query(pynvml) in a session of its own; None when NVML cannot start (no pynvml, no driver) or the query
    fails."""
    with NvmlSession() as session:
        return session.query(query)


def text(value: Any) -> str:
    """NVML strings are bytes in older pynvml, str in newer."""
    return value.decode() if isinstance(value, bytes) else str(value)


def guarded(read: Callable[[], T], default: Any = None) -> T | Any:
    """read(), or `default` when it raises: one NVML read that fails (an unsupported query, an older driver) has no
    answer, and never fails the cell."""
    try:
        return read()
    except Exception:
        return default
