"""How the CLI shows an environment build's progress (StackEnvironment.build's `progress` callback)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

from rich.console import Console
from rich.markup import escape

from fwbench.engines.local import BuildProgress, ProgressCallback

# Without a terminal, details (the package pip is on) are printed at most this often.
PLAIN_DETAIL_EVERY_S = 15.0


@contextmanager
def build_status(console: Console, title: str) -> Iterator[ProgressCallback]:
    """Yield a progress callback. On a terminal: each step is printed as a line (the first names the
    build log) under a status line that shows, in place, what pip is doing now. Otherwise: plain step
    lines, and now and then the current detail, so a long install in a CI log still shows it lives."""
    if console.is_terminal:
        with console.status(escape(f"{title}…")) as status:
            def show(event: BuildProgress) -> None:
                if event.step:
                    console.print(escape(f"  {event.message}"), highlight=False)
                status.update(escape(f"{title}: {event.message}"))

            yield show
        return

    last_detail = [time.monotonic()]

    def plain(event: BuildProgress) -> None:
        now = time.monotonic()
        if event.step:
            last_detail[0] = now
            console.print(escape(f"{title}: {event.message}"), highlight=False, soft_wrap=True)
        elif now - last_detail[0] >= PLAIN_DETAIL_EVERY_S:
            last_detail[0] = now
            console.print(escape(f"  ... {event.message}"), highlight=False, soft_wrap=True)

    yield plain
