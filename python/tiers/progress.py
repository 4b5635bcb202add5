"""Progress bars for long measurements, drawn on stderr only when it is a terminal."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def tool_progress(unit: str) -> Iterator[Callable[[int, int], None] | None]:
    """Yield a ``progress(done, total)`` callback that draws a bar counting
    ``unit`` on stderr, or None when stderr is not a terminal."""
    err_console = Console(stderr=True)
    if not err_console.is_terminal:
        yield None
        return
    bar = Progress(TextColumn("measuring"), BarColumn(),
                   TextColumn(f"{{task.completed}}/{{task.total}} {unit}"),
                   TimeElapsedColumn(), console=err_console, transient=True)
    with bar:
        task = bar.add_task(unit, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
