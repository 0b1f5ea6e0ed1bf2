"""One NVML session around a query: the runner, the engines and the cell ask NVML the same way.

Plain Python (pynvml is optional): a CPU machine has no pynvml or no driver, and every caller then gets None.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

T = TypeVar("T")


def nvml_query(query: Callable[[Any], T]) -> T | None:
    """query(pynvml) between nvmlInit and nvmlShutdown; None when NVML cannot start (no pynvml, no driver)
    or the query fails."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # pynvml.NVMLError or ImportError: a CPU machine
        return None
    try:
        return query(pynvml)
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
